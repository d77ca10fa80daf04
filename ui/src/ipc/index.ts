// The only module that talks to the engine. Views call `api.*`; every call goes through a
// `Transport`: HTTP in a browser (`/api/...` on the engine's loopback listener, authenticated by
// the HttpOnly session cookie the browser got from a one-time `keyhaven dashboard` link; the page
// itself holds no credential), or Tauri IPC in the app window (the shell's one `control` command, which
// serves the same `/api/...` routes without HTTP and answers `{status, body}`).
import type {
  BudgetInput,
  BudgetReport,
  CursorGuardReport,
  DoctorReport,
  AppInput,
  AppStatus,
  CaChange,
  CaStatus,
  CallDetail,
  CallPage,
  CallQuery,
  ClientSetup,
  ConnectionTest,
  Deleted,
  EngineStatus,
  EnvSetup,
  ErrorBody,
  ExportQuery,
  IpcReply,
  KeyInfo,
  LogLine,
  PriceOverrideInput,
  PriceReport,
  Model,
  ModelInput,
  ModelRouteInput,
  TabInput,
  Provider,
  ProviderInput,
  Retention,
  RetentionApplied,
  SessionList,
  SessionQuery,
  Routing,
  RouteOptions,
  RoutingInput,
  SetupClient,
  SetupPreview,
  SetupResult,
  Settings,
  SettingsApplied,
  SettingsInput,
  UsageQuery,
  UsageReport,
  UsageSeries,
  UsageSeriesQuery,
  WebSettings,
  WebSettingsInput,
  WebTestResult,
} from "./bindings.gen";

export type * from "./bindings.gen";

/** An engine error: `{kind, message}` from the API, or `network` / `http` / `decode` locally. */
export class EngineError extends Error implements ErrorBody {
  readonly kind: string;
  readonly status: number;
  constructor(kind: string, message: string, status = 0) {
    super(message);
    this.name = "EngineError";
    this.kind = kind;
    this.status = status;
  }
}

export type Method = "GET" | "POST" | "PUT" | "DELETE";

/** Moves one request to the engine and back. `path` starts with `/api/`. */
export interface Transport {
  request<T>(method: Method, path: string, body?: unknown): Promise<T>;
  /** A GET whose answer is a file (a CSV export): its text. */
  download(path: string): Promise<string>;
}

function isErrorBody(v: unknown): v is ErrorBody {
  return typeof v === "object" && v !== null && typeof (v as ErrorBody).kind === "string" && typeof (v as ErrorBody).message === "string";
}

export interface HttpOptions {
  baseUrl?: string;
  fetch?: typeof fetch;
}

/**
 * JSON over HTTP to the page's own origin. It sends no credential of its own: the browser adds
 * the session cookie (`credentials: "same-origin"`); `X-Keyhaven-UI` (and the browser's own
 * `Origin` or `Sec-Fetch-Site: same-origin`) shows the engine that the page itself asks.
 */
export class HttpTransport implements Transport {
  private readonly baseUrl: string;
  private readonly fetchFn: typeof fetch;

  constructor(opts: HttpOptions = {}) {
    this.baseUrl = opts.baseUrl ?? "";
    this.fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  async request<T>(method: Method, path: string, body?: unknown): Promise<T> {
    // X-Keyhaven-UI: proof for the engine that the page itself asks (a page of another origin
    // cannot send it without a CORS preflight, which the engine never grants).
    const headers: Record<string, string> = { Accept: "application/json", "X-Keyhaven-UI": "1" };
    const init: RequestInit = { method, headers, credentials: "same-origin", cache: "no-store" };
    // The engine wants application/json on every method but GET and HEAD, bodies or not.
    if (method !== "GET") {
      headers["Content-Type"] = "application/json";
      if (body !== undefined) init.body = JSON.stringify(body);
    }
    let res: Response;
    try {
      res = await this.fetchFn(this.baseUrl + path, init);
    } catch (e) {
      throw new EngineError("network", `cannot reach Keyhaven: ${e instanceof Error ? e.message : String(e)}`);
    }
    const text = await res.text();
    let parsed: unknown = undefined;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        if (res.ok) throw new EngineError("decode", `bad JSON from ${path}`, res.status);
      }
    }
    if (!res.ok) {
      if (isErrorBody(parsed)) throw new EngineError(parsed.kind, parsed.message, res.status);
      throw new EngineError("http", `${method} ${path}: HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ""}`, res.status);
    }
    return parsed as T;
  }

  async download(path: string): Promise<string> {
    const headers: Record<string, string> = { Accept: "text/csv, application/json", "X-Keyhaven-UI": "1" };
    let res: Response;
    try {
      res = await this.fetchFn(this.baseUrl + path, { method: "GET", headers, credentials: "same-origin", cache: "no-store" });
    } catch (e) {
      throw new EngineError("network", `cannot reach Keyhaven: ${e instanceof Error ? e.message : String(e)}`);
    }
    const text = await res.text();
    if (!res.ok) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (isErrorBody(parsed)) throw new EngineError(parsed.kind, parsed.message, res.status);
      throw new EngineError("http", `GET ${path}: HTTP ${res.status}`, res.status);
    }
    return text;
  }
}

/** Tauri's `invoke` (from `window.__TAURI__.core`, or a fake in tests). */
export type Invoke = (cmd: string, args?: Record<string, unknown>) => Promise<unknown>;

/** Control calls over the Tauri shell's `control` command: no token, same routes and errors. */
export class TauriTransport implements Transport {
  constructor(private readonly invoke: Invoke) {}

  async request<T>(method: Method, path: string, body?: unknown): Promise<T> {
    let reply: IpcReply;
    try {
      reply = (await this.invoke("control", { method, path, body: body === undefined ? null : body })) as IpcReply;
    } catch (e) {
      throw new EngineError("ipc", `cannot reach Keyhaven: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (typeof reply !== "object" || reply === null || typeof reply.status !== "number") {
      throw new EngineError("decode", `bad IPC answer for ${path}`);
    }
    if (reply.status >= 400) {
      const b = reply.body;
      if (isErrorBody(b)) throw new EngineError(b.kind, b.message, reply.status);
      throw new EngineError("http", `${method} ${path}: status ${reply.status}`, reply.status);
    }
    return (reply.body ?? undefined) as T;
  }

  /** The shell hands a file's text back as one JSON string. */
  async download(path: string): Promise<string> {
    const body = await this.request<unknown>("GET", path);
    if (typeof body === "string") return body;
    return JSON.stringify(body, null, 2);
  }
}

interface TauriGlobal {
  core?: { invoke?: Invoke };
}

/** Tauri's `invoke` when this page runs in the app window (`withGlobalTauri`), else undefined. */
export function tauriInvoke(g: { __TAURI__?: TauriGlobal } = globalThis as { __TAURI__?: TauriGlobal }): Invoke | undefined {
  const invoke = g.__TAURI__?.core?.invoke;
  return typeof invoke === "function" ? invoke : undefined;
}

/** True in the app window. */
export function inApp(): boolean {
  return tauriInvoke() !== undefined;
}

/** `?a=1&b=x` from the defined, non-null, non-empty values. */
export function queryString(params: Record<string, string | number | boolean | null | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === "") continue;
    q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

const seg = encodeURIComponent;

/** Typed wrappers, one per control route. */
export function createApi(t: Transport) {
  return {
    status: () => t.request<EngineStatus>("GET", "/api/status"),
    /** The checks of `keyhaven doctor`; each provider check sends one small request. */
    doctor: () => t.request<DoctorReport>("GET", "/api/doctor"),

    providers: () => t.request<Provider[]>("GET", "/api/providers"),
    createProvider: (p: ProviderInput) => t.request<Provider>("POST", "/api/providers", p),
    updateProvider: (name: string, p: ProviderInput) => t.request<Provider>("PUT", `/api/providers/${seg(name)}`, p),
    deleteProvider: (name: string) => t.request<void>("DELETE", `/api/providers/${seg(name)}`),
    testProvider: (name: string) => t.request<ConnectionTest>("POST", `/api/providers/${seg(name)}/test`),
    setKey: (name: string, value: string) => t.request<KeyInfo>("PUT", `/api/providers/${seg(name)}/key`, { value }),
    deleteKey: (name: string) => t.request<KeyInfo>("DELETE", `/api/providers/${seg(name)}/key`),

    models: () => t.request<Model[]>("GET", "/api/models"),
    createModel: (m: ModelInput) => t.request<Model>("POST", "/api/models", m),
    updateModel: (name: string, m: ModelInput) => t.request<Model>("PUT", `/api/models/${seg(name)}`, m),
    deleteModel: (name: string) => t.request<void>("DELETE", `/api/models/${seg(name)}`),
    testModel: (name: string) => t.request<ConnectionTest>("POST", `/api/models/${seg(name)}/test`),

    routing: () => t.request<Routing>("GET", "/api/routing"),
    setRouting: (r: RoutingInput) => t.request<Routing>("PUT", "/api/routing", r),
    setModelRoute: (model: string, r: ModelRouteInput) =>
      t.request<Routing>("PUT", `/api/routing/models/${seg(model)}`, r),
    setTab: (r: TabInput) => t.request<Routing>("PUT", "/api/routing/tab", r),

    ca: () => t.request<CaStatus>("GET", "/api/ca"),
    caInstall: () => t.request<CaChange>("POST", "/api/ca/install"),
    caUninstall: () => t.request<CaChange>("POST", "/api/ca/uninstall"),
    caRotate: () => t.request<CaChange>("POST", "/api/ca/rotate"),

    usage: (q: UsageQuery) => t.request<UsageReport>("GET", `/api/usage${queryString(q)}`),
    usageSeries: (q: UsageSeriesQuery) => t.request<UsageSeries>("GET", `/api/usage/series${queryString(q)}`),
    sessions: (q: SessionQuery) => t.request<SessionList>("GET", `/api/usage/sessions${queryString(q)}`),
    calls: (q: CallQuery) => t.request<CallPage>("GET", `/api/calls${queryString(q)}`),
    call: (id: string) => t.request<CallDetail>("GET", `/api/calls/${seg(id)}`),
    deleteCall: (id: string) => t.request<Deleted>("DELETE", `/api/calls/${seg(id)}`),
    /** The calls of a window as CSV or JSON text (no bodies). */
    exportCalls: (q: ExportQuery) => t.download(`/api/calls/export${queryString(q)}`),
    /** Usage per day, model, provider and client of a window as CSV or JSON text. */
    exportUsage: (q: ExportQuery) => t.download(`/api/usage/export${queryString(q)}`),

    /** The price table's version and each configured model's effective price. */
    prices: () => t.request<PriceReport>("GET", "/api/prices"),
    /** Overrides a model's prices (new calls only; each row keeps the version it was priced with). */
    setPrice: (model: string, p: PriceOverrideInput) => t.request<PriceReport>("PUT", `/api/prices/${seg(model)}`, p),
    /** Removes a model's price override (the table's price applies again). */
    unsetPrice: (model: string) => t.request<PriceReport>("DELETE", `/api/prices/${seg(model)}`),

    retention: () => t.request<Retention>("GET", "/api/retention"),
    setRetention: (r: Retention) => t.request<RetentionApplied>("PUT", "/api/retention", r),

    clients: () => t.request<ClientSetup[]>("GET", "/api/clients"),
    routeClient: (c: SetupClient, o: RouteOptions) => t.request<SetupResult>("POST", `/api/clients/${seg(c)}/route`, o),
    undoClient: (c: SetupClient) => t.request<SetupResult>("POST", `/api/clients/${seg(c)}/undo`),
    previewRoute: (c: SetupClient, o: RouteOptions) => t.request<SetupPreview>("POST", `/api/clients/${seg(c)}/route/preview`, o),
    previewUndo: (c: SetupClient) => t.request<SetupPreview>("POST", `/api/clients/${seg(c)}/undo/preview`),
    /** The generic client's exports, token redacted. */
    envSetup: () => t.request<EnvSetup>("GET", "/api/clients/env"),
    /** Issues the generic client's token if needed; the answer carries it. */
    routeEnv: () => t.request<EnvSetup>("POST", "/api/clients/env/route"),
    undoEnv: () => t.request<EnvSetup>("POST", "/api/clients/env/undo"),

    logs: (q: { n?: number; after?: number }) => t.request<LogLine[]>("GET", `/api/logs${queryString(q)}`),

    settings: () => t.request<Settings>("GET", "/api/settings"),
    setSettings: (s: SettingsInput) => t.request<SettingsApplied>("PUT", "/api/settings", s),

    // The agent's web tools (`[web]`); the Brave key is write-only like provider keys.
    web: () => t.request<WebSettings>("GET", "/api/web"),
    setWeb: (w: WebSettingsInput) => t.request<WebSettings>("PUT", "/api/web", w),
    setWebKey: (value: string) => t.request<WebSettings>("PUT", "/api/web/key", { value }),
    deleteWebKey: () => t.request<WebSettings>("DELETE", "/api/web/key"),
    testWebSearch: (query: string) => t.request<WebTestResult>("POST", "/api/web/test", { query }),

    // The Cursor update guard: versions seen, each one's self-test; Retry reruns it.
    cursorVersions: () => t.request<CursorGuardReport>("GET", "/api/cursor/versions"),
    retryCursorVersion: (version: string) => t.request<CursorGuardReport>("POST", `/api/cursor/versions/${seg(version)}/retry`),
    // Budgets (`[[budgets]]`): spend per budget this period; edits are written to the config file.
    budgets: () => t.request<BudgetReport>("GET", "/api/budgets"),
    createBudget: (b: BudgetInput) => t.request<BudgetReport>("POST", "/api/budgets", b),
    updateBudget: (name: string, b: BudgetInput) => t.request<BudgetReport>("PUT", `/api/budgets/${seg(name)}`, b),
    deleteBudget: (name: string) => t.request<BudgetReport>("DELETE", `/api/budgets/${seg(name)}`),

    // The app window only (the shell's supervisor); a browser gets 404 `not_found`.
    app: () => t.request<AppStatus>("GET", "/api/app"),
    setApp: (a: AppInput) => t.request<AppStatus>("PUT", "/api/app", a),
    start: () => t.request<AppStatus>("POST", "/api/app/start"),
    stop: () => t.request<AppStatus>("POST", "/api/app/stop"),
  };
}

export type Api = ReturnType<typeof createApi>;

let current: Api | undefined;

/** The transport for this page: IPC in the app window, HTTP with the session cookie elsewhere. */
export function defaultTransport(): Transport {
  const invoke = tauriInvoke();
  return invoke ? new TauriTransport(invoke) : new HttpTransport();
}

/** True when an engine error means this browser has no dashboard session (or it ended). */
export function isNoSession(e: unknown): boolean {
  return e instanceof EngineError && (e.kind === "unauthorized" || e.status === 401);
}

/** The app's API over `defaultTransport()` unless `setApi` installed another. */
export function api(): Api {
  current ??= createApi(defaultTransport());
  return current;
}

/** Swap the transport (Tauri IPC, tests). */
export function setApi(a: Api): void {
  current = a;
}
