// Formatting of what the API answers: counts, bytes, durations, times, message values.

export function formatNumber(n: number | null | undefined): string {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  return n.toLocaleString("en-US");
}

/** A per-second rate: `0`, `0.5/s`, `12/s`, `1.2k/s`. */
export function formatRate(perSecond: number | undefined): string {
  if (perSecond === undefined || Number.isNaN(perSecond)) return "–";
  if (perSecond === 0) return "0/s";
  if (perSecond < 10) return `${perSecond.toFixed(1)}/s`;
  if (perSecond < 1000) return `${Math.round(perSecond)}/s`;
  if (perSecond < 1_000_000) return `${(perSecond / 1000).toFixed(1)}k/s`;
  return `${(perSecond / 1_000_000).toFixed(1)}M/s`;
}

export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || Number.isNaN(bytes)) return "–";
  if (bytes < 0) return "unlimited";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** A duration in milliseconds, as its largest units: `250 ms`, `42 s`, `3 min 20 s`, `7 d`. -1 is forever. */
export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 0) return "forever";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
  const parts: string[] = [];
  let rest = Math.round(seconds);
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${unit}`);
      rest %= size;
    }
    if (parts.length === 2) break;
  }
  return parts.join(" ");
}

/** Epoch milliseconds as an ISO-like UTC time: `2026-12-02 10:50:14.123`. */
export function formatTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

export function base64ToBytes(b64: string): Uint8Array {
  const binary = atob(b64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

export function bytesToBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** `00 01 02 ff`, 16 bytes a line with the offset in front, like `xxd`. */
export function hexDump(bytes: Uint8Array): string {
  const lines: string[] = [];
  for (let offset = 0; offset < bytes.length; offset += 16) {
    const chunk = Array.from(bytes.slice(offset, offset + 16));
    const hex = chunk.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = chunk.map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${offset.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${text}`);
  }
  return lines.join("\n");
}

export interface MessageLike {
  value?: unknown;
  value_b64?: string;
  key?: string | null;
  key_b64?: string | null;
  key_json?: unknown;
}

/** A message's value for display: JSON pretty-printed, or raw bytes as hex or base64. */
export function renderValue(message: MessageLike, bytesAs: "hex" | "base64" = "hex"): { kind: "json" | "bytes" | "none"; text: string } {
  if (message.value_b64 !== undefined && message.value_b64 !== null) {
    const text = bytesAs === "base64" ? message.value_b64 : hexDump(base64ToBytes(message.value_b64));
    return { kind: "bytes", text };
  }
  if (message.value === undefined) return { kind: "none", text: "" };
  return { kind: "json", text: JSON.stringify(message.value, null, 2) };
}

/** A one-line preview of a value, at most `max` characters. */
export function previewValue(message: MessageLike, max = 120): string {
  let text: string;
  if (message.value_b64 !== undefined && message.value_b64 !== null) {
    const bytes = base64ToBytes(message.value_b64);
    text = `${bytes.length} bytes: ${Array.from(bytes.slice(0, 24)).map((b) => b.toString(16).padStart(2, "0")).join(" ")}`;
  } else {
    text = JSON.stringify(message.value) ?? "";
  }
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** A message's key for display (a decoded key as JSON, a bytes key as base64). */
export function displayKey(message: MessageLike): string {
  if (message.key_json !== undefined) return JSON.stringify(message.key_json);
  if (typeof message.key === "string") return message.key;
  if (typeof message.key_b64 === "string") return `b64:${message.key_b64}`;
  return "";
}

/** Kafka's murmur2 (as the node's partitioner, crates/herald-domain/src/partitioner.rs). */
export function murmur2(data: Uint8Array): number {
  const seed = 0x9747b28c;
  const m = 0x5bd1e995;
  const r = 24;
  let h = (seed ^ data.length) >>> 0;
  const whole = data.length - (data.length % 4);
  for (let i = 0; i < whole; i += 4) {
    let k = (data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)) >>> 0;
    k = Math.imul(k, m) >>> 0;
    k ^= k >>> r;
    k = Math.imul(k, m) >>> 0;
    h = Math.imul(h, m) >>> 0;
    h = (h ^ k) >>> 0;
  }
  const tail = data.length % 4;
  if (tail >= 3) h = (h ^ (data[whole + 2] << 16)) >>> 0;
  if (tail >= 2) h = (h ^ (data[whole + 1] << 8)) >>> 0;
  if (tail >= 1) {
    h = (h ^ data[whole]) >>> 0;
    h = Math.imul(h, m) >>> 0;
  }
  h = (h ^ (h >>> 13)) >>> 0;
  h = Math.imul(h, m) >>> 0;
  h = (h ^ (h >>> 15)) >>> 0;
  return h | 0;
}

/** The partition the node gives a keyed message: `toPositive(murmur2(key)) % partitions`. */
export function partitionForKey(key: string, partitions: number): number {
  const positive = murmur2(new TextEncoder().encode(key)) & 0x7fffffff;
  return positive % Math.max(1, partitions);
}
