// SPDX-License-Identifier: Apache-2.0
//
// kpng-rs's Service programs, one BPF object (kpng_sock.o): the cgroup
// sock_addr programs that send a socket straight to a Service's endpoint
// (kpng_cgroup.c), the tc programs that translate packets from outside
// the node (kpng_tc.c) and the XDP program that sends the packets of
// their flows on before the stack (kpng_xdp.c), over the maps and helpers
// they share
// (kpng_common.h). The two share maps, and the loader loads, pins and
// reuses them as one object, so the parts are one compilation unit:
// this file includes them.
//
// Built by clang (the command is in src/object.rs); the object is checked
// in beside this file, and a test rebuilds it and compares.
//
// The maps are written by the backend (src/layout.rs spells the same
// layouts in Rust); every multi-byte address and port is in network order.

#include "kpng_common.h"
#include "kpng_cgroup.c"
#include "kpng_tc.c"
#include "kpng_xdp.c"

char LICENSE[] SEC("license") = "Apache-2.0";
