// Command mcp-stdio is the bundled capsule that keeps third-party MCP
// (Model Context Protocol) stdio servers alive across tool calls: an
// agent starts a server (for instance `npx @modelcontextprotocol/server-
// everything`) once, as a persistent process, and lists and calls its
// tools in later calls, from whichever pooled instance each call lands on.
//
// No instance keeps state: every call frames its JSON-RPC request as one
// line on the server's stdin (write-stdin) with a request ID no other call
// uses, and finds the response with that ID in the server's stdout through
// read-since cursors, waking on the registry's events rather than polling.
// Notifications seen on the way are returned with the result; everything
// else the server says stays in its retained logs (stdout and stderr),
// readable with server_log or the daemon's logs.
package main

import "github.com/capsule-host/capsule-host/capsules/sdk"

func init() {
	sdk.Register(sdk.Tool{Name: "start_server", Description: startDesc, InputSchema: startSchema, Handler: sdk.Handle(startServer)})
	sdk.Register(sdk.Tool{Name: "list_tools", Description: listDesc, InputSchema: listSchema, Handler: sdk.Handle(listTools)})
	sdk.Register(sdk.Tool{Name: "call_tool", Description: callDesc, InputSchema: callSchema, Handler: sdk.Handle(callTool)})
	sdk.Register(sdk.Tool{Name: "server_log", Description: logDesc, InputSchema: logSchema, Handler: sdk.Handle(serverLog)})
	sdk.Register(sdk.Tool{Name: "stop_server", Description: stopDesc, InputSchema: stopSchema, Handler: sdk.Handle(stopServer)})
}

// main is empty: a reactor's tools are registered in init (_initialize).
func main() {}
