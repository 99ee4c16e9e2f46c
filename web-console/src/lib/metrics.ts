// Prometheus text exposition (what GET /metrics answers), parsed into samples, and rates computed
// from two scrapes. Only what the console shows is read: counters and gauges by name and labels.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses the text format: `name{label="value",...} number [timestamp]` lines; comments skipped. */
export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const rawLine of text.split("\n")) {
    const line = rawLine.trim();
    if (line === "" || line.startsWith("#")) continue;
    let name: string;
    let labels: Record<string, string> = {};
    let rest: string;
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    if (brace !== -1 && (space === -1 || brace < space)) {
      name = line.slice(0, brace);
      const parsed = parseLabels(line, brace + 1);
      if (!parsed) continue;
      labels = parsed.labels;
      rest = line.slice(parsed.end + 1).trim();
    } else {
      if (space === -1) continue;
      name = line.slice(0, space);
      rest = line.slice(space + 1).trim();
    }
    const value = parseValue(rest.split(/\s+/)[0] ?? "");
    if (value === undefined) continue;
    samples.push({ name, labels, value });
  }
  return samples;
}

function parseValue(text: string): number | undefined {
  switch (text) {
    case "+Inf":
      return Infinity;
    case "-Inf":
      return -Infinity;
    case "NaN":
      return NaN;
  }
  if (text === "") return undefined;
  const value = Number(text);
  return Number.isNaN(value) ? undefined : value;
}

/** Reads `a="x",b="y"}` from `start`; `end` is the index of the closing brace. */
function parseLabels(line: string, start: number): { labels: Record<string, string>; end: number } | undefined {
  const labels: Record<string, string> = {};
  let i = start;
  while (i < line.length) {
    while (line[i] === " " || line[i] === ",") i++;
    if (line[i] === "}") return { labels, end: i };
    const equals = line.indexOf("=", i);
    if (equals === -1 || line[equals + 1] !== '"') return undefined;
    const key = line.slice(i, equals).trim();
    let value = "";
    let j = equals + 2;
    for (; j < line.length; j++) {
      const c = line[j];
      if (c === "\\") {
        const next = line[j + 1];
        value += next === "n" ? "\n" : next;
        j++;
      } else if (c === '"') {
        break;
      } else {
        value += c;
      }
    }
    if (j >= line.length) return undefined;
    labels[key] = value;
    i = j + 1;
  }
  return undefined;
}

/** The sum of every sample of `name` whose labels pass `filter`; undefined when there is none. */
export function total(samples: Sample[], name: string, filter?: (labels: Record<string, string>) => boolean): number | undefined {
  let sum: number | undefined;
  for (const sample of samples) {
    if (sample.name === name && (!filter || filter(sample.labels))) sum = (sum ?? 0) + sample.value;
  }
  return sum;
}

/** The sum of `name` per value of `label`. */
export function byLabel(samples: Sample[], name: string, label: string): Map<string, number> {
  const sums = new Map<string, number>();
  for (const sample of samples) {
    if (sample.name !== name) continue;
    const key = sample.labels[label];
    if (key === undefined) continue;
    sums.set(key, (sums.get(key) ?? 0) + sample.value);
  }
  return sums;
}

export interface Scrape {
  atMs: number;
  samples: Sample[];
}

/**
 * Per-second increase of a counter between two scrapes (summed over the samples `filter`
 * keeps). A counter that went down (the node restarted) counts from zero, as Prometheus' rate().
 */
export function rate(previous: Scrape | undefined, current: Scrape, name: string, filter?: (labels: Record<string, string>) => boolean): number | undefined {
  if (!previous) return undefined;
  const seconds = (current.atMs - previous.atMs) / 1000;
  if (seconds <= 0) return undefined;
  const before = total(previous.samples, name, filter) ?? 0;
  // A counter with no sample yet was never incremented: it is 0.
  const after = total(current.samples, name, filter) ?? 0;
  const increase = after >= before ? after - before : after;
  return increase / seconds;
}

/** Per-second increase of a counter per value of `label` (see `rate`). */
export function ratesByLabel(previous: Scrape | undefined, current: Scrape, name: string, label: string): Map<string, number> {
  const rates = new Map<string, number>();
  if (!previous) return rates;
  const seconds = (current.atMs - previous.atMs) / 1000;
  if (seconds <= 0) return rates;
  const before = byLabel(previous.samples, name, label);
  for (const [key, after] of byLabel(current.samples, name, label)) {
    const prior = before.get(key) ?? 0;
    rates.set(key, (after >= prior ? after - prior : after) / seconds);
  }
  return rates;
}

/** Names starting with `__` are the node's own (`__audit`): left out of user-facing totals. */
export function isInternal(name: string): boolean {
  return name.startsWith("__");
}
