//! The iptables backend in the lab: the scenarios every backend passes,
//! then what only iptables has (its modes, a refused restore). Run as
//! root; otherwise each test prints SKIPPED and passes.

use kpng_backend_iptables::IptablesBackend;
use kpng_lab::scenarios;

#[test]
fn cluster_ip_balancing_affinity_masquerade_hairpin_and_udp() {
    scenarios::cluster_ip_balancing_affinity_masquerade_hairpin_and_udp::<IptablesBackend>();
}

#[test]
fn external_traffic_nodeports_external_ips_and_load_balancers() {
    scenarios::external_traffic_nodeports_external_ips_and_load_balancers::<IptablesBackend>();
}

#[test]
fn traffic_policies_fallback_hints_reject_and_drop() {
    scenarios::traffic_policies_fallback_hints_reject_and_drop::<IptablesBackend>();
}

#[test]
fn nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback() {
    scenarios::nodeports_listen_only_on_the_nodeport_addresses_never_on_loopback::<IptablesBackend>(
    );
}

#[test]
fn updates_move_services_and_claims_take_over() {
    scenarios::updates_move_services_and_claims_take_over::<IptablesBackend>();
}

#[test]
fn dual_stack_families_are_programmed_each_on_their_own() {
    scenarios::dual_stack_families_are_programmed_each_on_their_own::<IptablesBackend>(
        |_, _, _| {},
    );
}
