//go:build !leanclient

package api

import "github.com/capsule-host/capsule-host/client"

// NewTCP: see package client.
func NewTCP(addr, token string) *Client { return client.NewTCP(addr, token) }
