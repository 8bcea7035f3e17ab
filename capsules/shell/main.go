// Command shell is the bundled shell capsule: an agent runs shell commands
// that may outlive the tool call. Every process is a persistent one
// (capsule:process@1.1.0 spawn-persistent), so a later call on any pooled
// instance can read its logs with a cursor, write its stdin, or stop it.
//
// run_shell_command starts the command in the background from the
// beginning and waits up to yield_ms: a quick command returns its output
// and exit like a plain run; a slow one "moves to the background" simply
// by the tool returning its ID. No process is ever restarted or migrated.
package main

import "github.com/capsule-host/capsule-host/capsules/sdk"

func init() {
	sdk.Register(sdk.Tool{Name: "run_shell_command", Description: runDesc, InputSchema: runSchema, Handler: sdk.Handle(runShellCommand)})
	sdk.Register(sdk.Tool{Name: "spawn_background_process", Description: spawnDesc, InputSchema: spawnSchema, Handler: sdk.Handle(spawnBackground)})
	sdk.Register(sdk.Tool{Name: "read_process_logs", Description: readDesc, InputSchema: readSchema, Handler: sdk.Handle(readProcessLogs)})
	sdk.Register(sdk.Tool{Name: "write_process_stdin", Description: writeDesc, InputSchema: writeSchema, Handler: sdk.Handle(writeProcessStdin)})
	sdk.Register(sdk.Tool{Name: "list_processes", Description: listDesc, InputSchema: listSchema, Handler: sdk.Handle(listProcesses)})
	sdk.Register(sdk.Tool{Name: "kill_process", Description: killDesc, InputSchema: killSchema, Handler: sdk.Handle(killProcess)})
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}
