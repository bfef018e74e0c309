//! Connect-and-list for 20 loopback Streamable HTTP servers: the cold-start
//! cost of a gateway with many upstreams (handshake + `tools/list` per
//! server, concurrently, then projection and validator compilation).
//!
//! `cargo bench -p portcullis-upstream --bench connect`

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use portcullis_upstream::{ConnectOptions, McpServerConfig, connect};

const SERVERS: usize = 20;

fn connect_and_list(c: &mut Criterion) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => panic!("tokio runtime: {e}"),
    };
    let servers = runtime.block_on(async {
        let mut servers = Vec::with_capacity(SERVERS);
        for i in 0..SERVERS {
            servers.push(
                common::http_fixture(common::FixtureConfig {
                    label: i.to_string(),
                    ..Default::default()
                })
                .await,
            );
        }
        servers
    });
    let configs: Vec<McpServerConfig> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| McpServerConfig::streamable_http(format!("s{i}"), s.mcp_url()))
        .collect();
    let mut group = c.benchmark_group("connect");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("connect_and_list_20_http_servers", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let toolset = connect(configs.clone(), ConnectOptions::default())
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                // Every server connected and listed.
                assert_eq!(toolset.catalogue().servers().len(), SERVERS);
                assert!(toolset.diagnostics().is_empty());
                toolset.close().await;
            })
        })
    });
    group.finish();
}

criterion_group!(benches, connect_and_list);
criterion_main!(benches);
