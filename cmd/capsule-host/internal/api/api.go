// Package api is the former home of the daemon's wire types and client,
// now the public package github.com/capsule-host/capsule-host/client.
// These aliases keep code written against the old path compiling; new
// code imports client.
package api

import "github.com/capsule-host/capsule-host/client"

// Wire types and the client (see package client).
type (
	Health         = client.Health
	Tool           = client.Tool
	Capsule        = client.Capsule
	CapsuleList    = client.CapsuleList
	CapsuleFailure = client.CapsuleFailure
	ReloadRequest  = client.ReloadRequest
	ReloadResponse = client.ReloadResponse
	CallRequest    = client.CallRequest
	CallResponse   = client.CallResponse
	Exit           = client.Exit
	Process        = client.Process
	ProcessList    = client.ProcessList
	LogChunk       = client.LogChunk
	StopRequest    = client.StopRequest
	StopResponse   = client.StopResponse
	ErrorBody      = client.ErrorBody
	ErrorResponse  = client.ErrorResponse
	Error          = client.Error
	Client         = client.Client
	LogQuery       = client.LogQuery
	LoadProgress   = client.LoadProgress
	CapsuleState   = client.CapsuleState
)

// Error codes (see package client).
const (
	CodeInvalidRequest     = client.CodeInvalidRequest
	CodeUnauthorized       = client.CodeUnauthorized
	CodeForbidden          = client.CodeForbidden
	CodeNoSuchCapsule      = client.CodeNoSuchCapsule
	CodeNoSuchTool         = client.CodeNoSuchTool
	CodeNoSuchProcess      = client.CodeNoSuchProcess
	CodeToolError          = client.CodeToolError
	CodeTimeout            = client.CodeTimeout
	CodeTrap               = client.CodeTrap
	CodeCancelled          = client.CodeCancelled
	CodeShuttingDown       = client.CodeShuttingDown
	CodeLoading            = client.CodeLoading
	CodeInternal           = client.CodeInternal
	CodeConfigError        = client.CodeConfigError
	CodeTooManyConnections = client.CodeTooManyConnections
)

// ErrUnreachable: see package client.
var ErrUnreachable = client.ErrUnreachable

// ExitText: see package client.
func ExitText(e *Exit) string { return client.ExitText(e) }

// NewUnix: see package client.
func NewUnix(path string) *Client { return client.NewUnix(path) }
