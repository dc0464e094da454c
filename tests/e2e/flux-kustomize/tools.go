//go:build tools

// Package tools pins the command scripts/build-tools.sh builds from this module.
package tools

import _ "github.com/fluxcd/kustomize-controller"
