// Small helper processes for the e2e tests against real GitOps controllers:
// an in-memory Redis for Argo CD and a smart-HTTP Git server for Flux.
// Built by scripts/build-tools.sh.
module driftguard.test/e2e/gitops-aux

go 1.26.0

require github.com/alicebob/miniredis/v2 v2.40.0

require github.com/yuin/gopher-lua v1.1.1 // indirect
