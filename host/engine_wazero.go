package host

import "github.com/capsule-host/capsule-host/host/engine/wazero"

// wazero is the default engine and always compiled in.
func init() { RegisterEngine(wazero.Name, wazero.New) }
