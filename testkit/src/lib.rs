//! What driftguard's integration tests, examples and benchmarks share, one
//! crate instead of files each test includes by `#[path]`: a real control
//! plane (`control_plane`, etcd and kube-apiserver from scripts/build-tools.sh)
//! and the GitOps tools beside it (`gitops`), child processes and waits
//! (`process`), one environment shared by a binary's tests (`shared`),
//! floods and hostile clients, the oracles of the property tests
//! (`two_step`, `loosening`, `apiserver`) and of the generative e2e
//! (`generate`, `agreement`), and the builders of reviews (`common`).
//!
//! A dev-dependency of driftguard only; `publish = false`.

pub mod agreement;
pub use driftguard::registration::apiserver;
pub mod armed;
pub mod atomic_maps;
pub mod big_reviews;
pub mod common;
pub mod control_plane;
pub mod counting;
pub mod fleet;
pub mod flood;
pub mod generate;
pub mod generated_certs;
pub mod gitops;
pub mod gitops_e2e;
pub mod hostile;
pub mod loosening;
pub mod measure;
pub mod process;
pub mod rbac_audit;
pub mod renewal;
pub mod shared;
pub mod tcp_proxy;
pub mod two_step;
