//! What the webhooks receive: the one list of resources and subresources, used
//! by `driftguard register` (and checked against the Helm chart by a test).

pub struct Rule {
    pub api_groups: &'static [&'static str],
    pub resources: &'static [&'static str],
}

/// Workloads (with their scale subresources), Services, ConfigMaps, CronJobs and
/// Ingresses, on CREATE, UPDATE and DELETE. Pods and Jobs are left out: they are
/// nearly always children of a managed object, and the apiserver would call
/// driftguard for every one of them only for it to answer "out of scope".
pub const RULES: &[Rule] = &[
    Rule {
        api_groups: &["apps"],
        resources: &[
            "deployments",
            "deployments/scale",
            "statefulsets",
            "statefulsets/scale",
            "daemonsets",
            "replicasets",
            "replicasets/scale",
        ],
    },
    Rule {
        api_groups: &[""],
        resources: &["services", "configmaps"],
    },
    Rule {
        api_groups: &["batch"],
        resources: &["cronjobs"],
    },
    Rule {
        api_groups: &["networking.k8s.io"],
        resources: &["ingresses"],
    },
];

pub const OPERATIONS: &[&str] = &["CREATE", "UPDATE", "DELETE"];
