// Package modproxy holds the test that the repository's modules install
// with go get as a user's program gets them: it serves the root module and
// each user-facing submodule (redlockotel, redlockgocron, pgfence) from a
// file-based module proxy made from the working tree, at the versions the
// submodules' go.mod files require, and builds an outside program that
// imports them all. docs/releasing.md describes the tags it stands for.
//
// The package has no code of its own.
package modproxy
