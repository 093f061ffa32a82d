//! The eBPF backend with `--north-south none` in the lab: the socket
//! programs for the node's sockets, the tc programs on every node link
//! for everything from outside, and no netfilter backend. The scenarios
//! every backend passes, each sync checking that the node holds no
//! nftables table. Run as root with cgroup v2; otherwise each test prints
//! SKIPPED and passes.

use kpng_lab::EbpfTc;

kpng_lab::scenario_tests!(EbpfTc);
