//! Identity patterns judged by whom they match, not by how they are written.
//! Each section that exempts or empowers identities (`controllers`,
//! `trusted`, `breakGlass`) has identities it must never cover: a service
//! account in a namespace the pattern does not name (anyone who may create a
//! service account there would become it), any authenticated user, the
//! unauthenticated user, and, outside `trusted` (the kubelet's place), any
//! node. Every pattern is tried on such probe identities: the free parts of
//! their names (that namespace, the account's name, the user's name) are
//! chosen to suit the pattern by the glob's automaton ([`Pattern::witness`]),
//! and the match is confirmed by the matcher decisions use
//! ([`Identities::contains`]). A pattern that covers one is refused when the
//! policy loads, naming the identity and what to write instead.
//!
//! A glob before a `:` elsewhere is only a warning (`policy lint`): it spans
//! `:`-separated parts, which may be what was meant.

use std::hash::{BuildHasher, Hasher};
use std::sync::LazyLock;

use super::Identities;
use super::pattern::{Part, Pattern, Witness};
use super::reach::{NAME_CHARS, NAMESPACE_CHARS, SA_PREFIX};

/// A section of the policy that names identities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Section {
    /// `controllers`: the GitOps tools, exempt.
    Controllers,
    /// `trusted`: other identities whose writes are never manual, exempt.
    Trusted,
    /// `breakGlass.allowedUsers` and `allowedGroups`: who may break glass.
    BreakGlass,
}

/// Users or groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Users,
    Groups,
}

impl Section {
    /// The key `kind` is written under.
    pub(crate) fn field(self, kind: Kind) -> &'static str {
        match (self, kind) {
            (Section::Controllers, Kind::Users) => "controllers.users",
            (Section::Controllers, Kind::Groups) => "controllers.groups",
            (Section::Trusted, Kind::Users) => "trusted.users",
            (Section::Trusted, Kind::Groups) => "trusted.groups",
            (Section::BreakGlass, Kind::Users) => "breakGlass.allowedUsers",
            (Section::BreakGlass, Kind::Groups) => "breakGlass.allowedGroups",
        }
    }

    /// The probes it must never cover. Nodes are trusted by default (the
    /// kubelet); they are neither a GitOps tool nor a person.
    fn forbidden(self) -> &'static [Probe] {
        match self {
            Section::Trusted => &[Probe::AnyUser, Probe::ServiceAccount, Probe::Anonymous],
            Section::Controllers | Section::BreakGlass => &[
                Probe::AnyUser,
                Probe::ServiceAccount,
                Probe::Anonymous,
                Probe::Node,
            ],
        }
    }

    /// What covering an identity gives it.
    fn grants(self) -> &'static str {
        match self {
            Section::Controllers => {
                "exempt as a GitOps tool (and skipped by the webhooks' matchConditions)"
            }
            Section::Trusted => "trusted (and skipped by the webhooks' matchConditions)",
            Section::BreakGlass => "allowed to break glass",
        }
    }
}

/// A kind of identity some section must never cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// `system:serviceaccount:<ns>:<name>` for a namespace the pattern does not name.
    ServiceAccount,
    /// Any user at all, by a name the pattern says nothing about.
    AnyUser,
    /// `system:anonymous`.
    Anonymous,
    /// `system:node:<name>` for a node the pattern does not name.
    Node,
}

/// A free part of a probe's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Namespace,
    Name,
    User,
    Node,
}

/// A piece of a probe's username or group.
#[derive(Clone, Copy, Debug)]
enum Piece {
    Text(&'static str),
    Slot(Slot),
}

use Piece::{Slot as Free, Text};

/// Characters a username may hold, for one the pattern says nothing about.
const USER_CHARS: &str = "abcdefghijklmnopqrstuvwxyz0123456789-.@:_";

impl Probe {
    fn username(self) -> &'static [Piece] {
        match self {
            Probe::ServiceAccount => &[
                Text(SA_PREFIX),
                Free(Slot::Namespace),
                Text(":"),
                Free(Slot::Name),
            ],
            Probe::AnyUser => &[Free(Slot::User)],
            Probe::Anonymous => &[Text("system:anonymous")],
            Probe::Node => &[Text("system:node:"), Free(Slot::Node)],
        }
    }

    /// Its groups, as the apiserver's authenticators set them.
    fn groups(self) -> &'static [&'static [Piece]] {
        match self {
            Probe::ServiceAccount => &[
                &[Text("system:serviceaccounts")],
                &[Text("system:serviceaccounts:"), Free(Slot::Namespace)],
                &[Text("system:authenticated")],
            ],
            Probe::AnyUser => &[&[Text("system:authenticated")]],
            Probe::Anonymous => &[&[Text("system:unauthenticated")]],
            Probe::Node => &[&[Text("system:nodes")], &[Text("system:authenticated")]],
        }
    }

    fn about(self) -> &'static str {
        match self {
            Probe::ServiceAccount => {
                "a service account in a namespace it does not name: whoever may create a service account there (a glob's `*` also matches `:`)"
            }
            Probe::AnyUser => "any authenticated user",
            Probe::Anonymous => "the unauthenticated user, whoever sends no credentials",
            Probe::Node => "any node",
        }
    }
}

impl Slot {
    fn part(self) -> Part<'static> {
        match self {
            Slot::Namespace => Part::Unnamed(NAMESPACE_CHARS),
            Slot::Name => Part::Run(NAME_CHARS),
            Slot::User => Part::Unspelled(USER_CHARS),
            Slot::Node => Part::Unnamed(NAME_CHARS),
        }
    }
}

/// A name no policy writes: the probes' free parts stand for it unless a
/// pattern needs them to be something else. Random, so that no pattern can
/// name it on purpose.
static FRESH: LazyLock<String> = LazyLock::new(|| {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    let mut n = hasher.finish();
    let mut word = String::from("probe");
    for _ in 0..8 {
        word.push(char::from(
            b"abcdefghijklmnopqrstuvwxyz0123456789"[(n % 36) as usize],
        ));
        n /= 36;
    }
    word
});

/// The values of a probe's free parts.
struct Filled([String; 4]);

impl Filled {
    fn render(&self, pieces: &[Piece]) -> String {
        pieces
            .iter()
            .map(|p| match p {
                Text(t) => *t,
                Free(s) => self.0[*s as usize].as_str(),
            })
            .collect()
    }
}

/// The first pattern of `identities` that covers an identity `section` must
/// never cover: its kind and why, naming the identity and the fix.
pub(crate) fn refusal(section: Section, identities: &Identities) -> Option<(Kind, String)> {
    let (users, groups) = (identities.users.iter(), identities.groups.iter());
    let all = users
        .map(|p| (Kind::Users, p))
        .chain(groups.map(|p| (Kind::Groups, p)));
    for (kind, pattern) in all {
        for &probe in section.forbidden() {
            if let Some(why) = covers(section, identities, kind, pattern, probe) {
                return Some((kind, why));
            }
        }
    }
    None
}

/// Why `pattern` covers a `probe` identity, if it does.
fn covers(
    section: Section,
    identities: &Identities,
    kind: Kind,
    pattern: &Pattern,
    probe: Probe,
) -> Option<String> {
    let user = [probe.username()];
    let shapes: &[&[Piece]] = match kind {
        Kind::Users => &user,
        Kind::Groups => probe.groups(),
    };
    for shape in shapes {
        let parts: Vec<Part> = shape
            .iter()
            .map(|p| match p {
                Text(t) => Part::Text(t),
                Free(s) => s.part(),
            })
            .collect();
        let texts = match pattern.witness(&parts, &FRESH) {
            Witness::Found(texts) => texts,
            Witness::None => continue,
            Witness::Unreadable => return Some(unreadable(pattern.source())),
        };
        let mut filled = Filled(std::array::from_fn(|_| FRESH.clone()));
        for (piece, text) in shape.iter().zip(texts) {
            if let Free(slot) = piece {
                filled.0[*slot as usize] = text;
            }
        }
        let username = filled.render(probe.username());
        let groups: Vec<String> = probe.groups().iter().map(|g| filled.render(g)).collect();
        // The decision's own matcher has the last word.
        if identities.contains(&username, &groups) {
            let matched = match kind {
                Kind::Users => username,
                Kind::Groups => filled.render(shape),
            };
            return Some(message(section, kind, pattern.source(), probe, &matched));
        }
    }
    None
}

fn unreadable(pattern: &str) -> String {
    format!(
        "`{pattern}` uses glob syntax driftguard cannot read (`[[:class:]]`, nested `{{}}`, more than 64 alternatives), so it cannot tell whom it covers: write it with `*`, `?`, `[a-z]` and `{{a,b}}`"
    )
}

fn message(section: Section, kind: Kind, pattern: &str, probe: Probe, matched: &str) -> String {
    let what = match kind {
        Kind::Users => "user",
        Kind::Groups => "group",
    };
    format!(
        "`{pattern}` matches {what} `{matched}`, which stands for {}; every such identity would be {}. {}",
        probe.about(),
        section.grants(),
        fix(section, kind, pattern, probe)
    )
}

/// The narrower pattern to write instead.
fn fix(section: Section, kind: Kind, pattern: &str, probe: Probe) -> String {
    match (probe, kind, section) {
        (Probe::ServiceAccount, Kind::Users, _) => {
            let name = pattern
                .strip_prefix(SA_PREFIX)
                .and_then(|rest| rest.rsplit_once(':'))
                .map(|(_, name)| name)
                .filter(|name| !name.is_empty() && !name.contains(['*', '?', '[', '{']))
                .unwrap_or("NAME");
            format!("Name the namespaces: `{SA_PREFIX}{{argocd,argocd-apps}}:{name}`.")
        }
        (Probe::ServiceAccount, Kind::Groups, _) => {
            "Name the namespaces: `system:serviceaccounts:{argocd,flux-system}`.".into()
        }
        (Probe::Node, _, Section::Controllers) => {
            "A node is not a GitOps tool: the kubelet belongs in trusted.users (`system:node:*`)."
                .into()
        }
        (Probe::Anonymous, _, _) => "Remove it.".into(),
        (Probe::AnyUser | Probe::Node, _, Section::BreakGlass) => {
            "Name the people, or a group of them such as `sre-oncall`.".into()
        }
        (Probe::AnyUser | Probe::Node, _, _) => {
            "Name the identities, or a group only they are in.".into()
        }
    }
}

/// Whether `identities` cover some service account of `namespace` (its
/// name chosen to suit each user pattern), as decisions match it.
pub(crate) fn covers_an_account_of(identities: &Identities, namespace: &str) -> bool {
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".to_owned(),
    ];
    let shape = [
        Part::Text(SA_PREFIX),
        Part::Text(namespace),
        Part::Text(":"),
        Part::Run(NAME_CHARS),
    ];
    let names = identities
        .users
        .iter()
        .filter_map(|p| match p.witness(&shape, &FRESH) {
            Witness::Found(mut texts) => texts.pop(),
            Witness::None | Witness::Unreadable => None,
        });
    std::iter::once(FRESH.clone())
        .chain(names)
        .any(|name| identities.contains(&format!("{SA_PREFIX}{namespace}:{name}"), &groups))
}

/// A glob before a later `:`: it matches any number of `:`-separated parts
/// (`policy lint` reports it).
pub(crate) fn warning(pattern: &str) -> Option<String> {
    let glob = pattern.find(['*', '?', '['])?;
    pattern[glob..].contains(':').then(|| {
        format!(
            "`{pattern}`: the glob before `:` also matches `:`, so it spans any number of `:`-separated parts (`{}` matches it)",
            pattern.replacen('*', "a:b", 1)
        )
    })
}

#[cfg(test)]
mod tests;
