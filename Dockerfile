# The kpng binary on Debian 12 with the tools it drives.
#   docker build -t kpng .
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kpng-cli

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      iptables iproute2 ipset ipvsadm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/kpng /usr/local/bin/kpng
# kubeadm's kube-proxy DaemonSet runs /usr/local/bin/kube-proxy
# --config=... --hostname-override=...: the same image serves it.
RUN ln -s kpng /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/kpng"]
