// Client-side routes under /console/ (the node answers index.html for any of them).
import { useEffect, useState } from "preact/hooks";

export const BASE = "/console";

export function currentPath(): string {
  const path = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : location.pathname;
  return path === "" ? "/" : path;
}

export function navigate(path: string) {
  history.pushState(null, "", `${BASE}${path}`);
  dispatchEvent(new PopStateEvent("popstate"));
}

export function usePath(): [string, URLSearchParams] {
  const [, setTick] = useState(0);
  useEffect(() => {
    const update = () => setTick((n) => n + 1);
    addEventListener("popstate", update);
    return () => removeEventListener("popstate", update);
  }, []);
  return [currentPath(), new URLSearchParams(location.search)];
}

/** Matches `/topics/:name` against a path; the decoded parameters, or null. */
export function match(pattern: string, path: string): Record<string, string> | null {
  const want = pattern.split("/");
  const got = path.split("/");
  if (want.length !== got.length) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < want.length; i++) {
    if (want[i].startsWith(":")) params[want[i].slice(1)] = decodeURIComponent(got[i]);
    else if (want[i] !== got[i]) return null;
  }
  return params;
}
