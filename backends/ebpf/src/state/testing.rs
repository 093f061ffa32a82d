//! What the tests of [`write`](super::write) and [`adopt`](super::adopt)
//! share: reading a set back as a program does, and one-port Services.

use std::net::IpAddr;

use kpng_model::ServiceName;

use super::{Claim, Contribution, SetName, Side, index};
use crate::layout::{self, EMPTY_DROP, EMPTY_REJECT, Endpoint, Frontend, PAGE, Record, slot_key};
use crate::tables::{Recorder, Table};

/// The endpoints a frontend's record leads to, in slot order, reading
/// the count and the pages as a program does; `Err` names a page
/// missing below the count.
pub(super) fn lookup(t: &Recorder, frontend: &Frontend) -> Result<Vec<Endpoint>, String> {
    let Some(value) = t.value(Table::Services, &frontend.key()) else {
        return Ok(Vec::new());
    };
    let mut v = [0u8; 16];
    v.copy_from_slice(value);
    let set = Record::from_bytes(&v).set;
    let Some(first) = t.value(Table::Slots, &slot_key(set, 0)) else {
        return Ok(Vec::new());
    };
    let (count, _) = layout::page_of(first);
    (0..count as usize)
        .map(|i| {
            let page = t
                .value(Table::Slots, &slot_key(set, index(i / PAGE)))
                .ok_or(format!(
                    "page {} of set {set} missing, count {count}",
                    i / PAGE
                ))?;
            Ok(layout::page_of(page).1[i % PAGE])
        })
        .collect()
}

pub(super) fn endpoint(i: u8) -> Endpoint {
    Endpoint {
        ip: IpAddr::from([10, 244, 0, i]),
        port: 8080,
        local: i.is_multiple_of(3),
    }
}

pub(super) fn frontend(i: u8) -> Frontend {
    Frontend {
        ip: IpAddr::from([10, 96, 0, i]),
        port: 80,
        proto: crate::layout::TCP,
    }
}

/// Service `web-<i>`, one port, its ClusterIP 10.96.0.<i> on `eps`.
pub(super) fn single(i: u8, eps: &[Endpoint], affinity: bool) -> (ServiceName, Contribution) {
    let service = ServiceName::new("t", format!("web-{i}"));
    let set = SetName {
        service: service.clone(),
        port: 80,
        proto: crate::layout::TCP,
        v6: false,
        local: false,
    };
    let mut c = Contribution::default();
    c.sets.insert(set.clone(), eps.to_vec());
    c.records.insert(
        (Side::Socket, frontend(i)),
        Claim {
            set,
            affinity: if affinity { 60 } else { 0 },
            flags: if eps.is_empty() {
                EMPTY_REJECT
            } else {
                EMPTY_DROP
            },
        },
    );
    c.live.insert(frontend(i).ip);
    (service, c)
}

/// Service `web-<i>` as [`single`], reached from outside too (its
/// ClusterIP as an external IP), with Maglev balancing when `maglev`.
pub(super) fn from_outside(i: u8, eps: &[Endpoint], maglev: bool) -> (ServiceName, Contribution) {
    let (service, mut c) = single(i, eps, false);
    let Some(claim) = c.records.values().next().cloned() else {
        return (service, c);
    };
    let how = if maglev { layout::BAL_MAGLEV } else { 0 };
    c.records.insert(
        (Side::External, frontend(i)),
        Claim {
            flags: claim.flags | layout::EXT_SNAT | how,
            ..claim
        },
    );
    (service, c)
}

pub(super) fn sorted(mut eps: Vec<Endpoint>) -> Vec<Endpoint> {
    eps.sort();
    eps
}
