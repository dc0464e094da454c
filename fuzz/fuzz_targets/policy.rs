//! Arbitrary text as a policy file: `Policy::from_yaml`, then what
//! `driftguard policy lint` runs on it. Neither may panic or hang.
#![no_main]

use driftguard::Policy;
use driftguard::policy::lint::{self, Probed};
use libfuzzer_sys::fuzz_target;

/// Longer expressions are only compiled: `(.,.)|(.,.)|…` doubles its work per
/// stage, which lint bounds with a 5 s thread; here that would be a hang, or a
/// thread left running per input. Up to this length it stays small.
const PROBE_MAX_LEN: usize = 24;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Policy::from_yaml(text, "fuzz.yaml");
    let report = lint::lint_with(text, "fuzz.yaml", &|source| {
        if source.len() <= PROBE_MAX_LEN {
            lint::probe_now(source)
        } else {
            // A problem, so that the message and the rewrite are built too.
            Probed::Finished(Some("not probed".into()))
        }
    });
    assert!(
        report
            .problems
            .iter()
            .chain(&report.notes)
            .all(|m| !m.is_empty()),
        "an empty lint message: {report:?}"
    );
});
