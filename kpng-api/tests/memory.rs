//! The server's heap under watchers that come and go, counted by a global
//! allocator (this binary holds one test, so nothing else allocates
//! meanwhile). Memory, not time: nothing here is timed.

use std::time::Duration;

use kpng_api::{Server, bind_unix, connect_unix, serve};
use kpng_model::Kind;
use kpng_model::v1::{WatchRequest, watch_event::Event};
use kpng_store::Store;
use kpng_testkit::{Cluster, ClusterShape, CountingAllocator};

#[global_allocator]
static ALLOC: CountingAllocator = CountingAllocator;

const MIB: f64 = 1024.0 * 1024.0;

async fn settle(server: &Server) {
    for _ in 0..500 {
        if server.stats().open_streams == 0 {
            // Let the connection tasks finish dropping their buffers.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("streams still open: {:?}", server.stats());
}

#[test]
fn watchers_that_come_and_go_do_not_grow_the_server() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let cluster = Cluster::synthetic(ClusterShape {
        services: 1000,
        endpoints: 10_000,
        nodes: 400,
        zones: 3,
    });
    let mut store = Store::new();
    cluster.load_into(&mut store);
    store.mark_listed(Kind::Service);
    store.mark_listed(Kind::Endpoint);
    drop(cluster);
    let path = std::env::temp_dir().join(format!("kpng-api-memory-{}.sock", std::process::id()));
    let server = Server::new(store.reader());

    runtime.block_on(async {
        let serving = tokio::spawn(serve(bind_unix(&path).expect("bind"), server.clone()));
        let client = connect_unix(&path).await.expect("connect");
        // Reads node `n`'s whole view, up to its sync, and hangs up.
        let read_view = |n: usize| {
            let mut client = client.clone();
            async move {
                let mut stream = client
                    .watch(WatchRequest {
                        node: format!("node-{n}"),
                        ..Default::default()
                    })
                    .await
                    .expect("watch")
                    .into_inner();
                let mut ops = 0;
                let mut decoder = kpng_api::codec::compact::Decoder::new();
                loop {
                    let message = stream.message().await.expect("message").expect("open");
                    match message.event {
                        Some(Event::Changes(c)) => decoder
                            .batch::<kpng_model::Error>(c, |_| {
                                ops += 1;
                                Ok(())
                            })
                            .expect("valid changes"),
                        Some(Event::Sync(_)) => return ops,
                        _ => {}
                    }
                }
            }
        };
        // Warm-up: the bases, the connection, the allocator's pools.
        for round in 0..8 {
            let views: Vec<_> = (0..4)
                .map(|i| tokio::spawn(read_view(round * 4 + i)))
                .collect();
            for view in views {
                let ops = view.await.expect("task");
                assert!(ops > 10_000, "{ops} ops");
            }
        }
        settle(&server).await;
        let before = CountingAllocator::live_bytes();

        // 200 more watchers of 200 other nodes, four at a time, each
        // reading its whole view and going away.
        for round in 0..50 {
            let views: Vec<_> = (0..4)
                .map(|i| tokio::spawn(read_view(32 + round * 4 + i)))
                .collect();
            for view in views {
                let ops = view.await.expect("task");
                assert!(ops > 10_000, "{ops} ops");
            }
        }
        settle(&server).await;
        let after = CountingAllocator::live_bytes();
        let grown = (after - before) as f64 / MIB;
        println!(
            "200 watchers came and went: heap {:.1} -> {:.1} MiB",
            before as f64 / MIB,
            after as f64 / MIB
        );
        assert!(
            grown < 1.0,
            "the server kept {grown:.1} MiB after its watchers left"
        );

        // 40 watchers of distinct nodes that stop reading after the first
        // message: what each holds is bounded (a few queued batches).
        let mut stalled = Vec::new();
        for n in 0..40 {
            // Each on its own connection, as agents are: a stalled stream
            // holds its connection's flow-control window.
            let mut stream = connect_unix(&path)
                .await
                .expect("connect")
                .watch(WatchRequest {
                    node: format!("node-{}", 300 + n),
                    ..Default::default()
                })
                .await
                .expect("watch")
                .into_inner();
            stream.message().await.expect("message").expect("open");
            stalled.push(stream);
            // Reading nothing more.
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held = (CountingAllocator::live_bytes() - after) as f64 / MIB;
        println!(
            "40 stalled watchers hold {held:.1} MiB ({:.2} MiB each)",
            held / 40.0
        );
        assert!(held / 40.0 < 4.0, "{held:.1} MiB for 40 stalled watchers");
        drop(stalled);
        settle(&server).await;
        let left = (CountingAllocator::live_bytes() - after) as f64 / MIB;
        assert!(
            left < 1.0,
            "{left:.1} MiB left after the stalled watchers went"
        );
        serving.abort();
        let _ = std::fs::remove_file(&path);
    });
}
