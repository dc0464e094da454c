//! Break-glass at run time: everything that writes to the cluster for it,
//! shared by the server (the expiry sweeper) and `kubectl driftguard
//! break-glass`. What a break-glass is, and what a write may do to one, is
//! the decision core's ([`crate::drift::breakglass_state`]); this module only
//! arms, pauses the GitOps tool, ends, and sweeps.
//!
//! - [`pause`]: what arming pauses and ending undoes, as merge patches;
//! - [`application`]: the Argo CD Application's shared pause;
//! - [`ending`]: ending one break-glass (the object, then its Application);
//! - [`record`]: the armed set, one ConfigMap per armed object;
//! - [`sweeper`]: ending every break-glass that expired, on one replica;
//! - [`lease`]: the Lease that elects that replica.

pub mod application;
pub mod ending;
pub mod lease;
pub mod pause;
pub mod record;
pub mod sweeper;
