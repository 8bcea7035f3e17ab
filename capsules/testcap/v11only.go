//go:build capsule_v11only

package main

func registerV10() {}
