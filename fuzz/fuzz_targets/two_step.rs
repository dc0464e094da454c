//! The two-step invariant as a differential oracle (like Kyverno's
//! FuzzPodBypass): the fuzzer picks a policy, a managed stored object, a first
//! manual write and a second one; if the second is denied on the stored
//! object, it must stay denied after an allowed first write.
#![no_main]

#[path = "../../testkit/src/two_step.rs"]
mod two_step;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let scenario = two_step::Scenario::from_bytes(data);
    if let Err(why) = scenario.check() {
        panic!("{scenario:?}\n{why}");
    }
});
