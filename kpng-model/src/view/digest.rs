//! [`ViewDigest`]: the content digest of a node view.

use super::{NodeView, ServiceView};
use crate::ServiceName;
use crate::v1::{IpSet, Node};

/// A digest of a [`NodeView`]'s content: equal views have equal digests
/// in every process, so a watcher can tell a restarted server (or another
/// replica) which view it holds, and the server can tell whether that view
/// is still current without sending it.
///
/// The digest is the wrapping sum of one 128-bit term per Service (its
/// name and its [`ServiceView`]) and one for the node object, each a
/// SipHash-1-3 of the content under a fixed key. A sum can be kept up to
/// date in O(changed Services): subtract a Service's old term, add its new
/// one. The revision is not part of it. Terms come from the types' `Hash`,
/// so two builds of kpng-rs that hash differently only disagree, and a
/// disagreement costs a full transfer, never a wrong view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ViewDigest(u128);

impl ViewDigest {
    /// The digest of a whole view, from scratch: O(view).
    pub fn of(view: &NodeView) -> Self {
        let mut digest =
            Self::node_term(view.node.as_deref()) + Self::service_cidrs_term(&view.service_cidrs);
        for (name, service) in &view.services {
            digest = digest + Self::service_term(name, service);
        }
        digest
    }

    /// The term a Service contributes.
    pub fn service_term(name: &ServiceName, service: &ServiceView) -> Self {
        Self(stable_hash(&(name.namespace(), name.name(), service)))
    }

    /// The term the node object (or its absence) contributes.
    pub fn node_term(node: Option<&Node>) -> Self {
        Self(stable_hash(&("node", node)))
    }

    /// The term the Service CIDRs contribute: none when there are none
    /// (a view without them digests as it did before they existed).
    pub fn service_cidrs_term(cidrs: &IpSet) -> Self {
        if cidrs.is_empty() {
            Self::default()
        } else {
            Self(stable_hash(&("service-cidrs", cidrs)))
        }
    }

    /// The 16 bytes sent on the wire (big-endian).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The digest in `bytes`, or `None` unless there are exactly 16.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        Some(Self(u128::from_be_bytes(bytes.try_into().ok()?)))
    }
}

/// Adds a term.
impl std::ops::Add for ViewDigest {
    type Output = Self;
    fn add(self, term: Self) -> Self {
        Self(self.0.wrapping_add(term.0))
    }
}

/// Takes a term away.
impl std::ops::Sub for ViewDigest {
    type Output = Self;
    fn sub(self, term: Self) -> Self {
        Self(self.0.wrapping_sub(term.0))
    }
}

impl std::fmt::Display for ViewDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// SipHash-1-3, 128 bits, under a fixed key: the same in every process.
fn stable_hash<T: std::hash::Hash + ?Sized>(value: &T) -> u128 {
    use siphasher::sip128::{Hasher128, SipHasher13};
    use std::hash::Hasher as _;
    let mut hasher = SipHasher13::new_with_keys(0x6b70_6e67_2d72_7321, 0x7669_6577_2d64_6967);
    value.hash(&mut hasher);
    hasher.write_u8(0);
    hasher.finish128().as_u128()
}
