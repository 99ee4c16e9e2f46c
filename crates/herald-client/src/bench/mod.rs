//! `herald bench`: load generators that measure a running Herald server over its HTTP API.
//!
//! They report throughput (messages/s, MB/s of values, requests/s) and request latency
//! percentiles; see `benches/README.md` for how to run them and how results are recorded. Each
//! concept has its own file: the produce and consume generators, the consumer group reader and
//! rebalance timer, the shared message budget, the `--rate` pacer, and the statistics/report.

pub mod budget;
pub mod consume;
pub mod group;
pub mod pacer;
pub mod produce;
pub mod produce_bodies;
pub mod queue;
pub mod queue_memory;
pub mod rebalance;
pub mod request;
pub mod sink;
pub mod stats;
pub mod ws;
pub mod ws_client;
pub mod ws_measure;

pub use consume::BenchConsumeArgs;
pub use group::BenchGroupArgs;
pub use produce::BenchProduceArgs;
pub use queue::BenchQueueArgs;
pub use rebalance::BenchRebalanceArgs;
pub use request::BenchRequestArgs;
pub use sink::BenchSinkArgs;
pub use ws::BenchWsArgs;

/// `herald bench ...`.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Produce messages as fast as possible (or at --rate) and report throughput and latency.
    Produce(BenchProduceArgs),
    /// Read a topic from the beginning and report throughput and latency.
    Consume(BenchConsumeArgs),
    /// Read a topic as a consumer group of several members, committing after each poll.
    Group(BenchGroupArgs),
    /// Time how long a consumer group takes to rebalance when one member leaves.
    Rebalance(BenchRebalanceArgs),
    /// Request/reply round trips per second and latency, against a responder loop.
    Request(BenchRequestArgs),
    /// Queue throughput (pull + ack) of one subscription against reads by offset, ack latency;
    /// or with --memory, a node's memory with a large unacked backlog.
    Queue(BenchQueueArgs),
    /// WebSocket figures: produce-to-delivery latency at a rate, publish throughput against
    /// HTTP, idle subscribers' memory and CPU, fan-out of one partition to many subscribers.
    Ws(BenchWsArgs),
    /// An HTTP server that takes produce requests and does nothing with them: `bench produce`
    /// against it measures the machine's HTTP and load-generator ceiling (`make bench`).
    #[command(hide = true)]
    Sink(BenchSinkArgs),
}

/// Runs one benchmark against `server` and prints its report on stdout (text, or one JSON object
/// with `--json`).
pub async fn run_bench(server: &str, command: BenchCommand) -> anyhow::Result<()> {
    let (report, as_json) = match command {
        BenchCommand::Produce(args) => {
            let as_json = args.json;
            (produce::run(server, args).await?, as_json)
        }
        BenchCommand::Consume(args) => {
            let as_json = args.json;
            (consume::run(server, args).await?, as_json)
        }
        BenchCommand::Group(args) => {
            let as_json = args.json;
            (group::run(server, args).await?, as_json)
        }
        BenchCommand::Request(args) => {
            let as_json = args.json;
            (request::run(server, args).await?, as_json)
        }
        BenchCommand::Queue(args) => {
            let as_json = args.json;
            let text = if args.memory {
                let report = queue_memory::run(server, args).await?;
                if as_json {
                    serde_json::to_string(&report)? + "\n"
                } else {
                    report.render_text()
                }
            } else {
                let report = queue::run(server, args).await?;
                if as_json {
                    serde_json::to_string(&report)? + "\n"
                } else {
                    report.render_text()
                }
            };
            print!("{text}");
            return Ok(());
        }
        BenchCommand::Ws(args) => {
            let as_json = args.json;
            let report = ws::run(server, args).await?;
            if as_json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render_text());
            }
            return Ok(());
        }
        BenchCommand::Sink(args) => return sink::run(args).await,
        BenchCommand::Rebalance(args) => {
            let report = rebalance::run(server, args.clone()).await?;
            if args.json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", report.render_text());
            }
            return Ok(());
        }
    };
    if as_json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.render_text());
    }
    if report.messages == 0 && report.errors > 0 {
        anyhow::bail!("every request failed ({} errors)", report.errors);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: BenchCommand,
    }

    #[test]
    fn produce_defaults_match_the_documentation() {
        let cli = Cli::try_parse_from(["bench", "produce"]).unwrap();
        let BenchCommand::Produce(args) = cli.command else {
            panic!("not produce")
        };
        assert_eq!(args.topic, "bench");
        assert_eq!(
            (args.partitions, args.message_size, args.batch_size),
            (4, 100, 1000)
        );
        assert_eq!((args.connections, args.messages), (8, 1_000_000));
        assert_eq!(args.acks, crate::cli::client::Acks::All);
        assert!(!args.raw && !args.bytes && !args.json && args.rate.is_none());
    }

    #[test]
    fn produce_options_parse() {
        let cli = Cli::try_parse_from([
            "bench",
            "produce",
            "--raw",
            "--connections",
            "64",
            "--rate",
            "2500",
            "--acks",
            "leader",
        ])
        .unwrap();
        let BenchCommand::Produce(args) = cli.command else {
            panic!("not produce")
        };
        assert!(args.raw);
        assert_eq!(args.connections, 64);
        assert_eq!(args.rate, Some(2500.0));
    }

    #[test]
    fn consume_defaults() {
        let cli = Cli::try_parse_from(["bench", "consume", "--json"]).unwrap();
        let BenchCommand::Consume(args) = cli.command else {
            panic!("not consume")
        };
        assert_eq!((args.max_messages, args.messages), (1000, 1_000_000));
        assert!(args.json && args.connections.is_none());
    }

    #[test]
    fn queue_defaults_and_nodes() {
        let cli = Cli::try_parse_from(["bench", "queue"]).unwrap();
        let BenchCommand::Queue(args) = cli.command else {
            panic!("not queue")
        };
        assert_eq!(
            (args.pullers, args.partitions, args.messages),
            (4, 4, 100_000)
        );
        assert!(args.nodes.is_empty() && !args.memory && args.pid.is_none());
        let cli = Cli::try_parse_from([
            "bench",
            "queue",
            "--nodes",
            "http://127.0.0.1:2,http://127.0.0.1:3",
        ])
        .unwrap();
        let BenchCommand::Queue(args) = cli.command else {
            panic!("not queue")
        };
        assert_eq!(
            queue::node_urls("http://127.0.0.1:1", &args.nodes),
            [
                "http://127.0.0.1:1",
                "http://127.0.0.1:2",
                "http://127.0.0.1:3"
            ]
        );
    }

    #[test]
    fn ws_defaults_match_the_documentation() {
        let cli = Cli::try_parse_from(["bench", "ws"]).unwrap();
        let BenchCommand::Ws(args) = cli.command else {
            panic!("not ws")
        };
        assert_eq!(args.only, ["latency", "publish", "idle", "fanout"]);
        assert_eq!((args.rate, args.latency_messages), (10_000.0, 50_000));
        assert_eq!((args.batch, args.publish_size), (1000, 1000));
        assert_eq!((args.idle, args.fanout_subscribers), (10_000, 1000));
        assert!(args.produce_server.is_none() && args.pid.is_none());
        let cli =
            Cli::try_parse_from(["bench", "ws", "--only", "idle,fanout", "--pid", "7"]).unwrap();
        let BenchCommand::Ws(args) = cli.command else {
            panic!("not ws")
        };
        assert_eq!(args.only, ["idle", "fanout"]);
        assert_eq!(args.pid, Some(7));
    }

    #[test]
    fn request_defaults_and_options() {
        let cli = Cli::try_parse_from(["bench", "request"]).unwrap();
        let BenchCommand::Request(args) = cli.command else {
            panic!("not request")
        };
        assert_eq!(args.topic, "bench-requests");
        assert_eq!((args.requesters, args.requests), (16, 10_000));
        assert_eq!((args.partitions, args.timeout_ms), (1, 10_000));
        assert!(args.responder_server.is_none() && !args.json);
        let cli = Cli::try_parse_from([
            "bench",
            "request",
            "--requesters",
            "64",
            "--responder-server",
            "http://127.0.0.1:9",
        ])
        .unwrap();
        let BenchCommand::Request(args) = cli.command else {
            panic!("not request")
        };
        assert_eq!(args.requesters, 64);
        assert_eq!(args.responder_server.as_deref(), Some("http://127.0.0.1:9"));
    }
}
