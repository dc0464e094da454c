//! What the GitOps tools' own records say they manage, read from their
//! status: an Argo CD Application's `status.resources` (every object in Git,
//! `Missing` ones included, which the next sync creates) and a Flux
//! Kustomization's `status.inventory` (every object it applied). A person who
//! creates one of these first would have the tool adopt whatever they put in
//! it (server-side and client-side apply both keep fields Git does not name).

use serde_json::Value;

/// One object, as `group/Kind:namespace/name` (the format of an Argo CD
/// tracking id and of driftguard's pause list).
pub(crate) fn key(group: &str, kind: &str, namespace: &str, name: &str) -> String {
    format!("{group}/{kind}:{namespace}/{name}")
}

/// Whether the parts a tool's status names can be one object's: no key
/// syntax (`/`, `:`), wildcard (`*`) or project marker (`@`) in them, which a
/// forged status would use to list every object, or another namespace's.
fn one_object(group: &str, kind: &str, namespace: &str, name: &str) -> bool {
    let clean = |s: &str| !s.contains(['/', ':', '*', '@']);
    !kind.is_empty() && !name.is_empty() && [group, kind, namespace, name].into_iter().all(clean)
}

/// What a source refused for its cost lists ([`crate::cluster::source_cost`]):
/// every object of a namespace it names, or of every namespace.
pub(crate) const EVERYWHERE: &str = "*/*:*/*";

/// The namespace and the `group/Kind` a wide listing's key names.
pub(crate) const ANY_NAMESPACE: &str = "*";
pub(crate) const ANY_KIND: &str = "*/*";

/// Every object of `namespace` (`""`: every cluster-scoped one).
pub(crate) fn everything_in(namespace: &str) -> String {
    key("*", "*", namespace, "*")
}

/// Every object of every namespace Argo CD project `project` lets its
/// Applications deploy to here (`@` is in no namespace's name): what a
/// refused Application lists past [`widen`]'s bound, resolved by
/// [`crate::drift::Sources::covers`].
pub(crate) fn within_project(project: &str) -> String {
    key("*", "*", &format!("@{project}"), "*")
}

/// The project a [`within_project`] listing names.
pub(crate) fn project_of(key: &str) -> Option<&str> {
    key.strip_prefix("*/*:@")?.strip_suffix("/*")
}

/// Whether `key` is a whole-namespace listing ([`widen`]).
pub(crate) fn is_wide(key: &str) -> bool {
    key.starts_with("*/*:")
}

/// Whether the whole-namespace listing `key` covers `namespace`.
pub(crate) fn covers(key: &str, namespace: &str) -> bool {
    key == EVERYWHERE || key.strip_prefix("*/*:") == Some(&format!("{namespace}/*"))
}

/// `keys` widened to the namespaces they name: a listing too costly to
/// hold still lists at least what it did (a name over 63 bytes is no
/// namespace's, so nothing there can be created). When even the namespaces
/// pass `at_most`, every object of every namespace `project` deploys to (of
/// every namespace, with no project).
pub(crate) fn widen(keys: &[String], at_most: usize, project: Option<&str>) -> Vec<String> {
    let mut namespaces: Vec<&str> = keys
        .iter()
        .filter_map(|k| k.split_once(':')?.1.split_once('/'))
        .map(|(ns, _)| ns)
        .filter(|ns| ns.len() <= 63)
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    if namespaces.len() > at_most {
        return vec![project.map_or_else(|| EVERYWHERE.to_owned(), within_project)];
    }
    namespaces.into_iter().map(everything_in).collect()
}

/// The objects an Application's `status` lists in `resources`.
pub(crate) fn application_keys(status: &Value) -> Vec<String> {
    fn text<'v>(r: &'v Value, k: &str) -> &'v str {
        r.get(k).and_then(Value::as_str).unwrap_or_default()
    }
    status
        .get("resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            let [group, kind, namespace, name] =
                ["group", "kind", "namespace", "name"].map(|k| text(r, k));
            one_object(group, kind, namespace, name).then(|| key(group, kind, namespace, name))
        })
        .collect()
}

/// The objects in a Kustomization's `status.inventory.entries`, whose ids are
/// `<namespace>_<name>_<group>_<kind>` (fluxcd/pkg `object.ObjMetadata`;
/// Kubernetes names, groups and kinds hold no `_`).
pub(crate) fn kustomization_keys(status: &Value) -> Vec<String> {
    status
        .pointer("/inventory/entries")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let id = e.get("id")?.as_str()?;
            let mut parts = id.split('_');
            let (namespace, name, group, kind) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            (parts.next().is_none() && one_object(group, kind, namespace, name))
                .then(|| key(group, kind, namespace, name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_applications_resources_and_a_kustomizations_inventory_are_read() {
        let app = json!({"resources": [
            {"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "prod", "name": "web",
             "status": "OutOfSync", "health": {"status": "Missing"}},
            {"version": "v1", "kind": "Namespace", "name": "prod", "status": "Synced"},
            {"kind": "", "name": "broken"}]});
        assert_eq!(
            application_keys(&app),
            vec!["apps/Deployment:prod/web", "/Namespace:/prod"]
        );
        let k = json!({"inventory": {"entries": [
            {"id": "prod_web_apps_Deployment", "v": "v1"},
            {"id": "_prod__Namespace", "v": "v1"},
            {"id": "not-an-id"}]}});
        assert_eq!(
            kustomization_keys(&k),
            vec!["apps/Deployment:prod/web", "/Namespace:/prod"]
        );
        assert!(application_keys(&json!({})).is_empty());
    }

    /// A forged status cannot list every object, a project's, or another
    /// namespace's through key syntax.
    #[test]
    fn what_cannot_be_one_object_is_not_listed() {
        let app = json!({"resources": [
            {"group": "*", "kind": "*", "namespace": "*", "name": "*"},
            {"group": "apps", "kind": "Deployment", "namespace": "@team", "name": "w"},
            {"group": "x:kube-system", "kind": "K", "namespace": "shop", "name": "n"},
            {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "a/b"},
            {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "web"}]});
        assert_eq!(application_keys(&app), ["apps/Deployment:shop/web"]);
        let flux = json!({"inventory": {"entries": [{"id": "*_*_*_*"}, {"id": "shop_web_apps_Deployment"}]}});
        assert_eq!(kustomization_keys(&flux), ["apps/Deployment:shop/web"]);
    }

    #[test]
    fn a_widened_listing_covers_every_namespace_it_named() {
        let keys = [
            "apps/Deployment:a/x",
            "/Service:b/y",
            "apps/Deployment:a/z",
            "/Namespace:/a",
        ]
        .map(String::from);
        let wide = widen(&keys, 3, None);
        assert_eq!(wide, ["*/*:/*", "*/*:a/*", "*/*:b/*"]);
        assert!(wide.iter().all(|k| is_wide(k)));
        assert!(covers(&wide[1], "a") && !covers(&wide[1], "b"));
        assert_eq!(widen(&keys, 2, None), [EVERYWHERE]);
        assert!(covers(EVERYWHERE, "c"));
        let scoped = widen(&keys, 2, Some("team"));
        assert_eq!(scoped, ["*/*:@team/*"]);
        assert_eq!(project_of(&scoped[0]), Some("team"));
        assert!(is_wide(&scoped[0]) && !covers(&scoped[0], "team"));
    }
}
