//! Vault names more than one machine owns, said in words: `ferry vault list`, `/v1/vaults`, the
//! status page and `ferry doctor` show each collision, and what a call by that name reaches
//! here, so none is ever settled silently.
//!
//! The rule a call follows (`Network::place_of`): a name this gateway holds (owned, or followed
//! from one owner) means that vault; a name only peers hold means the one peer that claims it;
//! a name two or more peers claim, and this gateway does not hold, is refused
//! `409 vault_ambiguous`, nothing sent.

use ferry_ticket::NodeId;

use crate::names::VaultName;
use crate::store::vaults::{Role, VaultRow};

/// How to choose between vaults of one name, for a person.
fn how_to_choose(name: &str) -> String {
    format!("follow the one you mean here (`ferry vault follow {name} --owner LABEL`), or untrust the other owner")
}

/// The collision of a vault this gateway holds (`local`) with `claimants`, the trusted peers
/// that say they own a vault of the same name, in words; `None` if there is none.
pub fn of_local(
    local: &VaultRow,
    claimants: &[NodeId],
    label_of: impl Fn(&NodeId) -> String,
) -> Option<String> {
    let others: Vec<String> = claimants
        .iter()
        .filter(|owner| **owner != local.owner)
        .map(&label_of)
        .collect();
    if others.is_empty() {
        return None;
    }
    let mine = match local.role {
        Role::Owner => "the vault this machine owns".to_string(),
        Role::Replica => format!("this machine's replica of {}'s", label_of(&local.owner)),
    };
    Some(format!(
        "{} also own{} a vault called {:?}: calls by this name here reach {mine}",
        others.join(" and "),
        if others.len() == 1 { "s" } else { "" },
        local.name
    ))
}

/// The collision of a peer's vault, `owner`'s vault called `name`, as a remote row: with a
/// vault this gateway holds (`local`), or with the other `claimants`.
pub fn of_remote(
    name: &str,
    owner: &NodeId,
    local: Option<&VaultRow>,
    claimants: &[NodeId],
    label_of: impl Fn(&NodeId) -> String,
) -> Option<String> {
    if let Some(local) = local {
        let here = match local.role {
            Role::Owner => "this machine owns a vault of that name".to_string(),
            Role::Replica => format!("this machine follows {}'s", label_of(&local.owner)),
        };
        return Some(format!(
            "{here}: calls by the name {name:?} here reach that one, never {}'s",
            label_of(owner)
        ));
    }
    if claimants.len() < 2 {
        return None;
    }
    let owners: Vec<String> = claimants.iter().map(&label_of).collect();
    Some(format!(
        "{} each own a vault called {name:?}: calls by this name here are refused (vault_ambiguous), nothing sent; {}",
        owners.join(" and "),
        how_to_choose(name)
    ))
}

/// A vault name more than one machine owns, as `ferry doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub vault: String,
    /// Calls by the name are refused here (no copy held, several peers claim it).
    pub refused: bool,
    pub says: String,
    /// What to do, for a refused name.
    pub fix: Option<String>,
}

/// Every collision between `held` (the vaults this gateway holds) and `claims` (every
/// (name, owner) trusted peers claim), one per name.
pub fn every(
    held: &[VaultRow],
    claims: &[(VaultName, NodeId)],
    label_of: impl Fn(&NodeId) -> String,
) -> Vec<Collision> {
    let mut names: Vec<&str> = claims.iter().map(|(name, _)| name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut found = Vec::new();
    for name in names {
        let claimants: Vec<NodeId> = claims
            .iter()
            .filter(|(claimed, _)| claimed == name)
            .map(|(_, owner)| *owner)
            .collect();
        let local = held.iter().find(|row| row.name == name);
        let says = match (local, claimants.as_slice()) {
            (Some(local), _) => of_local(local, &claimants, &label_of),
            (None, [first, _, ..]) => of_remote(name, first, None, &claimants, &label_of),
            (None, _) => None,
        };
        if let Some(says) = says {
            let refused = local.is_none();
            found.push(Collision {
                vault: name.to_string(),
                refused,
                says,
                fix: refused.then(|| how_to_choose(name)),
            });
        }
    }
    found
}

/// The detail of a `409 vault_ambiguous` refusal.
pub fn ambiguous_detail(name: &str, owners: &[String]) -> String {
    format!(
        "{} each own a vault called {name:?}, and these are different vaults: nothing was sent. To reach one, {}",
        owners.join(" and "),
        how_to_choose(name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(byte: u8) -> NodeId {
        NodeId::from_bytes([byte; 32])
    }

    fn label(node: &NodeId) -> String {
        format!("p{}", node.as_bytes()[0])
    }

    fn row(role: Role, owner: NodeId) -> VaultRow {
        VaultRow {
            name: VaultName::from_static("notes"),
            owner,
            role,
            revision: 0,
        }
    }

    #[test]
    fn each_collision_is_said_with_what_a_call_reaches() {
        let mine = row(Role::Owner, node(9));
        assert_eq!(of_local(&mine, &[], label), None);
        let said = of_local(&mine, &[node(1)], label).unwrap_or_default();
        assert!(
            said.contains("p1 also owns") && said.contains("this machine owns"),
            "{said}"
        );
        // A replica's own owner is no collision; a third owner is.
        let replica = row(Role::Replica, node(1));
        assert_eq!(of_local(&replica, &[node(1)], label), None);
        let said = of_local(&replica, &[node(1), node(2)], label).unwrap_or_default();
        assert!(
            said.contains("p2 also owns") && said.contains("replica of p1"),
            "{said}"
        );
        let said = of_remote(
            "notes",
            &node(2),
            Some(&replica),
            &[node(1), node(2)],
            label,
        )
        .unwrap_or_default();
        assert!(said.contains("never p2's"), "{said}");
        assert_eq!(of_remote("notes", &node(2), None, &[node(2)], label), None);
        let said =
            of_remote("notes", &node(2), None, &[node(1), node(2)], label).unwrap_or_default();
        assert!(said.contains("refused (vault_ambiguous)"), "{said}");
    }

    #[test]
    fn every_collision_is_found_once_per_name() {
        let claims = vec![
            (VaultName::from_static("notes"), node(1)),
            (VaultName::from_static("notes"), node(2)),
            (VaultName::from_static("photos"), node(1)),
            (VaultName::from_static("mine"), node(2)),
        ];
        let mut mine = row(Role::Owner, node(9));
        mine.name = VaultName::from_static("mine");
        let found = every(&[mine], &claims, label);
        let names: Vec<(&str, bool)> = found
            .iter()
            .map(|c| (c.vault.as_str(), c.refused))
            .collect();
        assert_eq!(names, vec![("mine", false), ("notes", true)]);
        assert!(found[1].fix.is_some());
    }
}
