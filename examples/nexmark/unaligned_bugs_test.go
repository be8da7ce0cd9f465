//go:build ucbugs

package nexmark_test

func init() { unalignedKnownBugs = true }
