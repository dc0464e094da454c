//! Arbitrary text as an `--argocd-application` manifest file: the reader that
//! turns YAML documents into Applications with ignore rules must never panic.
#![no_main]

use driftguard::Policy;
use driftguard::policy::argocd;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(imported) = argocd::parse(text, "fuzz-apps.yaml") {
        for app in &imported.applications {
            assert!(!app.name.is_empty(), "an Application without a name");
            let _ = app.describe_source();
            let _ = app.tracks(&app.name, app.namespace.as_deref(), "argocd");
        }
        let _ = Policy::embedded().with_applications(imported.applications);
    }
});
