package oci

// forgetLive makes this process forget a container, as if it were a
// fresh host process: only the disk state remains.
func forgetLive(sdir string) {
	live.Lock()
	delete(live.m, sdir)
	live.Unlock()
}
