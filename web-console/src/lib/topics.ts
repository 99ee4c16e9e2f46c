// Listing topics a page at a time (`GET /v1/topics?limit=&page_token=&prefix=`), so no page of
// the console fetches every topic of a cluster with thousands of them at once.
import { enc, type Api, type Topic } from "./api";

/** `GET /v1/topics` with `limit`: a page, and where the next one starts while more follow. */
export interface TopicList {
  topics: Topic[];
  next_page_token?: string | null;
}

/** The most topics one page may hold (the API's `MAX_PAGE_LIMIT`). */
export const MAX_TOPIC_PAGE = 1000;
/** The topics page's page size unless the operator picks another. */
export const DEFAULT_TOPIC_PAGE = 100;
/** The page sizes the topics page offers. */
export const TOPIC_PAGE_SIZES = [10, 25, 100, 250, 1000];
/** At most this many topics are read where a page needs them all (about 20 requests). */
export const ALL_TOPICS_CAP = 20_000;

export interface TopicQuery {
  limit: number;
  pageToken?: string;
  prefix?: string;
}

/** The path of one page of topics. */
export function topicsPath(query: TopicQuery): string {
  const limit = Math.max(1, Math.min(MAX_TOPIC_PAGE, Math.floor(query.limit) || DEFAULT_TOPIC_PAGE));
  let path = `/v1/topics?limit=${limit}`;
  if (query.pageToken) path += `&page_token=${enc(query.pageToken)}`;
  if (query.prefix) path += `&prefix=${enc(query.prefix)}`;
  return path;
}

type Getter = Pick<Api, "get">;

export function listTopics(api: Getter, query: TopicQuery): Promise<TopicList> {
  return api.get<TopicList>(topicsPath(query));
}

/** Every topic (whose name starts with `prefix`), following page tokens, up to `cap`. */
export interface AllTopics {
  topics: Topic[];
  /** False when `cap` stopped the walk with more topics left. */
  complete: boolean;
  /** Requests made. */
  pages: number;
}

export async function listAllTopics(api: Getter, options: { prefix?: string; cap?: number } = {}): Promise<AllTopics> {
  const cap = options.cap ?? ALL_TOPICS_CAP;
  const topics: Topic[] = [];
  let pageToken: string | undefined;
  let pages = 0;
  for (;;) {
    const limit = Math.min(MAX_TOPIC_PAGE, Math.max(1, cap - topics.length));
    const page = await listTopics(api, { limit, pageToken, prefix: options.prefix });
    pages += 1;
    topics.push(...page.topics);
    pageToken = page.next_page_token ?? undefined;
    if (!pageToken || page.topics.length === 0) return { topics, complete: true, pages };
    if (topics.length >= cap) return { topics, complete: false, pages };
  }
}

/**
 * Where the topics page is: its page size, name prefix, the token of the page shown (none: the
 * first) and those of the pages before it, for *Previous*.
 */
export interface Pager {
  limit: number;
  prefix: string;
  token?: string;
  /** The tokens of the pages before this one, the first page's as "". */
  before: string[];
}

export function firstPage(limit = DEFAULT_TOPIC_PAGE, prefix = ""): Pager {
  return { limit, prefix, before: [] };
}

export function nextPage(pager: Pager, nextToken: string): Pager {
  return { ...pager, token: nextToken, before: [...pager.before, pager.token ?? ""] };
}

export function previousPage(pager: Pager): Pager {
  if (pager.before.length === 0) return pager;
  const before = pager.before.slice(0, -1);
  const token = pager.before[pager.before.length - 1];
  return { ...pager, token: token || undefined, before };
}

/** A pager saved in history state, if it is one (else the first page). */
export function restorePager(saved: unknown): Pager {
  const p = saved as Partial<Pager> | null | undefined;
  if (!p || typeof p.limit !== "number" || !TOPIC_PAGE_SIZES.includes(p.limit) || typeof p.prefix !== "string" || !Array.isArray(p.before)) return firstPage();
  if (!p.before.every((t) => typeof t === "string") || (p.token !== undefined && typeof p.token !== "string")) return firstPage();
  return { limit: p.limit, prefix: p.prefix, token: p.token, before: p.before };
}

/** What the topics page says about the page it shows: `shown` topics, `more` after them. */
export function pageSummary(pager: Pager, shown: number, more: boolean): string {
  const number = pager.before.length + 1;
  const starting = pager.prefix ? ` starting with "${pager.prefix}"` : "";
  if (shown === 0) {
    if (number > 1) return `Page ${number} · no more topics${starting}`;
    return pager.prefix ? `No topics start with "${pager.prefix}"` : "No topics yet";
  }
  if (number === 1 && !more) return `${shown} ${shown === 1 ? "topic" : "topics"}${starting}`;
  const first = pager.before.length * pager.limit + 1;
  return `Page ${number} · topics ${first}–${first + shown - 1}${starting} · ${more ? "more follow" : "last page"}`;
}
