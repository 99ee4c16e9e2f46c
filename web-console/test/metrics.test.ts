import { describe, expect, it } from "vitest";
import { byLabel, parseMetrics, rate, ratesByLabel, total } from "../src/lib/metrics";

// A slice of a real node's /metrics (metrics-exporter-prometheus), with the shapes that matter.
const SCRAPE = `# HELP herald_produced_messages_total Messages written
# TYPE herald_produced_messages_total counter
herald_produced_messages_total{topic="orders"} 3
herald_produced_messages_total{topic="__audit"} 4
# TYPE herald_cluster_nodes gauge
herald_cluster_nodes{status="draining"} 0
herald_cluster_nodes{status="up"} 3
herald_cluster_partitions_led 6
herald_http_request_duration_seconds_bucket{method="GET",route="/v1/topics",status="200",le="+Inf"} 7
herald_weird{path="a \\"quoted\\" b,c",x="1"} 2.5e3
herald_nan NaN
`;

describe("parseMetrics", () => {
  const samples = parseMetrics(SCRAPE);

  it("reads names, labels and values, skipping comments", () => {
    expect(samples.find((s) => s.name === "herald_cluster_partitions_led")?.value).toBe(6);
    expect(total(samples, "herald_produced_messages_total")).toBe(7);
    expect(total(samples, "herald_produced_messages_total", (l) => l.topic === "orders")).toBe(3);
    expect(total(samples, "herald_missing")).toBeUndefined();
  });

  it("unescapes label values, and reads exponents, +Inf labels and NaN", () => {
    const weird = samples.find((s) => s.name === "herald_weird");
    expect(weird?.labels).toEqual({ path: 'a "quoted" b,c', x: "1" });
    expect(weird?.value).toBe(2500);
    expect(samples.find((s) => s.name.endsWith("_bucket"))?.labels.le).toBe("+Inf");
    expect(Number.isNaN(samples.find((s) => s.name === "herald_nan")?.value)).toBe(true);
  });

  it("sums by label", () => {
    expect(byLabel(samples, "herald_cluster_nodes", "status")).toEqual(
      new Map([
        ["draining", 0],
        ["up", 3],
      ]),
    );
  });
});

describe("rate", () => {
  const at = (atMs: number, orders: number) => ({ atMs, samples: parseMetrics(`herald_produced_messages_total{topic="orders"} ${orders}\n`) });

  it("is the per-second increase between two scrapes", () => {
    expect(rate(at(1000, 10), at(3000, 30), "herald_produced_messages_total")).toBe(10);
    expect(ratesByLabel(at(0, 0), at(500, 5), "herald_produced_messages_total", "topic").get("orders")).toBe(10);
  });

  it("needs two scrapes, and counts a reset counter from zero", () => {
    expect(rate(undefined, at(1000, 5), "herald_produced_messages_total")).toBeUndefined();
    expect(rate(at(0, 100), at(1000, 4), "herald_produced_messages_total")).toBe(4);
  });

  it("is 0 for a counter never incremented", () => {
    expect(rate(at(0, 1), { atMs: 1000, samples: [] }, "herald_consumed_messages_total")).toBe(0);
  });
});
