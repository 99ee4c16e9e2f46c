import { Api } from "./api";

/** The one client of the node this page came from; the session lives as long as the tab. */
export const api = new Api({ storage: typeof sessionStorage === "undefined" ? null : sessionStorage });
