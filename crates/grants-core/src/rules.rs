//! The two rules placement and settlement share: which instances a grant
//! serves, and in which order competing grants and instances are considered.

use crate::placement::Billing;

/// Who a grant is for, or who an instance belongs to: a tenant and maybe one
/// of its projects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub(crate) tenant_id: &'a str,
    pub(crate) project_id: Option<&'a str>,
}

/// Whether a grant owned by `grant` may hold an instance owned by `instance`
/// (contract section 4): same tenant, the grant names no project or the
/// instance's, and the instance is billed (`billing: "none"` never enters a
/// grant).
pub(crate) fn serves(grant: Owner<'_>, instance: Owner<'_>, billing: Billing) -> bool {
    billing == Billing::Standard
        && grant.tenant_id == instance.tenant_id
        && grant
            .project_id
            .is_none_or(|project| instance.project_id == Some(project))
}

/// Sort key among grants competing for the same instance: project-scoped
/// grants first, then the earliest `startsAt`, then the grant id.
pub(crate) fn grant_preference<'a>(
    project_id: Option<&str>,
    starts_at: i64,
    grant_id: &'a str,
) -> (bool, i64, &'a str) {
    (project_id.is_none(), starts_at, grant_id)
}

/// Sort key for "oldest first": `createdAt`, then the instance id.
pub(crate) fn oldest_first(created_at: i64, instance_id: &str) -> (i64, &str) {
    (created_at, instance_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner<'a>(tenant_id: &'a str, project_id: Option<&'a str>) -> Owner<'a> {
        Owner {
            tenant_id,
            project_id,
        }
    }

    #[test]
    fn a_tenant_wide_grant_serves_every_project_of_its_tenant() {
        let grant = owner("acme", None);
        assert!(serves(grant, owner("acme", None), Billing::Standard));
        assert!(serves(
            grant,
            owner("acme", Some("prj_a")),
            Billing::Standard
        ));
        assert!(!serves(grant, owner("other", None), Billing::Standard));
    }

    #[test]
    fn a_project_grant_serves_only_its_project() {
        let grant = owner("acme", Some("prj_a"));
        assert!(serves(
            grant,
            owner("acme", Some("prj_a")),
            Billing::Standard
        ));
        assert!(!serves(
            grant,
            owner("acme", Some("prj_b")),
            Billing::Standard
        ));
        assert!(!serves(grant, owner("acme", None), Billing::Standard));
    }

    #[test]
    fn unbilled_instances_are_never_served() {
        assert!(!serves(
            owner("acme", None),
            owner("acme", None),
            Billing::None
        ));
    }

    #[test]
    fn project_grants_are_preferred_then_earliest_then_by_id() {
        let mut keys = [
            grant_preference(None, 0, "rgrant_a"),
            grant_preference(Some("prj"), 5, "rgrant_c"),
            grant_preference(Some("prj"), 5, "rgrant_b"),
            grant_preference(Some("prj"), 1, "rgrant_z"),
        ];
        keys.sort();
        let ids: Vec<&str> = keys.iter().map(|k| k.2).collect();
        assert_eq!(ids, ["rgrant_z", "rgrant_b", "rgrant_c", "rgrant_a"]);
    }
}
