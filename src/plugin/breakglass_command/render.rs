//! What `kubectl driftguard break-glass` prints: the server's refusal, whole;
//! what was armed or ended and what the GitOps tool does now, as text on
//! stdout (warnings on stderr), or the [`Report`] as JSON or YAML; and the
//! exit code.

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};

use super::flow::Written;
use super::report::{ObjectRef, PauseReport, Report};
use crate::plugin::api::{Refusal, Reply, Resource};
use crate::plugin::out::{Out, errln, outln};
use crate::plugin::{Output, PluginError, print_structured};

/// The object and the caller, as every output names them.
pub(super) struct Answer<'a> {
    pub output: Output,
    /// KIND/NAME as given.
    pub target: &'a str,
    pub resource: &'a Resource,
    pub name: &'a str,
    /// The command's namespace (the object's, when its type is namespaced).
    pub namespace: &'a str,
    pub shown: &'a str,
    pub user: &'a str,
    pub reason: Option<&'a str>,
}

impl Answer<'_> {
    /// Prints what a write did and returns the exit code: 1 for a refusal.
    /// `expires`: when arming, the expiry and the duration asked for;
    /// `hint`: after a refusal, what the policy's copy explains.
    pub fn written(
        &self,
        written: Written,
        expires: Option<(Timestamp, SignedDuration)>,
        hint: impl FnOnce() -> Option<String>,
    ) -> Result<ExitCode, PluginError> {
        match written {
            Written::Done(reply, pause) => self.done(&reply, &pause, expires),
            Written::Denied(refusal) => self.denied(&refusal, hint()),
            Written::Unpausable(why) => self.unpausable(&why),
        }
    }

    fn report(
        &self,
        action: &'static str,
        expires: Option<String>,
        refused: Option<&str>,
    ) -> Report<'_> {
        Report {
            object: ObjectRef {
                kind: &self.resource.kind,
                name: self.name,
                namespace: self.resource.namespaced.then_some(self.namespace),
            },
            action,
            user: self.user,
            reason: self.reason,
            expires,
            refusal: refused.map(str::to_owned),
            hint: None,
            pause: None,
        }
    }

    fn structured(&self) -> bool {
        self.output != Output::Text
    }

    /// Refused by the server (its dry run or the write itself).
    fn denied(&self, refusal: &Refusal, hint: Option<String>) -> Result<ExitCode, PluginError> {
        for w in &refusal.warnings {
            errln!("Warning: {w}");
        }
        // The server's own words, whole: they are the answer.
        errln!("denied: {}", refusal.message);
        errln!("nothing was written");
        if let Some(hint) = &hint {
            errln!("hint: {hint}");
        }
        if self.structured() {
            let mut r = self.report("refused", None, Some(&refusal.message));
            r.hint = Some(hint);
            print_structured(&mut Out::stdout(), &r, self.output)?;
        }
        Ok(ExitCode::from(1))
    }

    /// `--require-pause` and the tool cannot be paused.
    fn unpausable(&self, why: &str) -> Result<ExitCode, PluginError> {
        errln!("refused: --require-pause: {why}");
        errln!("nothing was written");
        if self.structured() {
            let why = format!("--require-pause: {why}");
            print_structured(
                &mut Out::stdout(),
                &self.report("refused", None, Some(&why)),
                self.output,
            )?;
        }
        Ok(ExitCode::from(1))
    }

    /// Armed (`expires`) or ended.
    fn done(
        &self,
        reply: &Reply,
        pause: &PauseReport,
        expires: Option<(Timestamp, SignedDuration)>,
    ) -> Result<ExitCode, PluginError> {
        for w in &reply.warnings {
            errln!("Warning: {w}");
        }
        if let Some(warning) = &pause.warning {
            errln!("warning: {warning}");
        }
        if self.structured() {
            let mut r = match expires {
                Some((at, _)) => self.report("granted", Some(at.to_string()), None),
                None => self.report("ended", None, None),
            };
            r.pause = Some(pause);
            print_structured(&mut Out::stdout(), &r, self.output)?;
            return Ok(exit_code(pause));
        }
        let out = &mut Out::stdout();
        let shown = self.shown;
        let where_ = if self.resource.namespaced {
            format!(" in namespace {}", self.namespace)
        } else {
            String::new()
        };
        match expires {
            Some((at, duration)) => {
                outln!(
                    out,
                    "break-glass set on {shown}{where_} by {} for {duration:#}, until {at}",
                    self.user
                );
                out.line(&pause.text);
                outln!(
                    out,
                    "until then, manual changes to it by identities allowed to break glass are allowed (with a warning, audited, and a BreakGlassUsed Event)"
                );
                // Only a pause this break-glass holds is lifted at expiry.
                let what = if pause.state == "paused" {
                    "the break-glass and the pause"
                } else {
                    "the break-glass"
                };
                outln!(
                    out,
                    "at {at} it expires: driftguard removes {what} within its sweep interval, and the GitOps tool restores Git; end it earlier with `kubectl driftguard break-glass {} --end`; put the fix in Git",
                    self.target
                );
            }
            None => {
                outln!(out, "break-glass removed from {shown}{where_}");
                if !pause.text.is_empty() {
                    out.line(&pause.text);
                }
                outln!(out, "changes to it by hand are judged as drift again");
            }
        }
        Ok(exit_code(pause))
    }
}

/// 0, or 2 (an access error) when the object was ended but its
/// Application's pause could not be lifted: left for the user to finish.
pub(super) fn exit_code(pause: &PauseReport) -> ExitCode {
    if pause.state == "lift-failed" {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
