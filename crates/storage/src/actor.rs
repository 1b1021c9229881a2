//! Who an operation acts for.

use crate::ids::TenantId;

/// The tenant a call acts in, and the platform's root tenant: what every
/// visibility rule compares (root sees all, a tenant its own and what is
/// offered to it). One value instead of a `(tenant, root)` pair of strings,
/// so the two cannot be swapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    tenant: TenantId,
    root: TenantId,
}

impl Actor {
    /// `tenant` acting on a platform whose root tenant is `root`.
    pub fn new(tenant: TenantId, root: TenantId) -> Self {
        Actor { tenant, root }
    }

    /// The root tenant acting for itself.
    pub fn root_of(root: TenantId) -> Self {
        Actor {
            tenant: root.clone(),
            root,
        }
    }

    /// The tenant the call acts in.
    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The platform's root tenant.
    pub fn root(&self) -> &TenantId {
        &self.root
    }

    /// Whether the call acts as root.
    pub fn is_root(&self) -> bool {
        self.tenant == self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_the_root_tenant_acting() {
        let root = TenantId::parse("root").unwrap();
        let acme = TenantId::parse("acme").unwrap();
        assert!(Actor::root_of(root.clone()).is_root());
        assert!(!Actor::new(acme.clone(), root.clone()).is_root());
        assert_eq!(Actor::new(acme.clone(), root).tenant(), &acme);
    }
}
