package registry

// LogID is the short hash that stands for a process ID in log lines (the
// "proc" attribute of the registry's own lines), so that other layers can
// log about a process in the same terms without ever logging the ID.
// Added for cmd/capsule-host (operator views and shutdown logs).
func (r *Registry) LogID(id string) string { return r.keyOf(id).short() }
