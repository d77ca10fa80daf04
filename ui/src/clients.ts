// The Clients page's view model: what each card says and which buttons it offers, the route
// options a card sends, and the diff lines of a preview. Pure (no DOM, no engine calls).
import type { ClientSetup, Model, RouteOptions, SetupClient } from "./ipc";

export type ClientState = "routed" | "routedByHand" | "changedSince" | "notRouted";

export interface ClientCard {
  client: SetupClient;
  title: string;
  configPath: string;
  detected: boolean;
  state: ClientState;
  /** One line for people: where the client stands. */
  status: string;
  /** Route is offered (also to re-apply with other options). */
  canRoute: boolean;
  routeLabel: string;
  /** Restore is possible: Keyhaven recorded its change. */
  canRestore: boolean;
  /** The client asks for a model name (Claude Code, Codex). */
  takesModel: boolean;
  /** Cursor: the HTTP/2 switch. */
  takesHttp2: boolean;
  restartHint: string;
  /** Things to know before routing. */
  notes: string[];
}

function stateOf(c: ClientSetup): ClientState {
  if (c.routed) return c.recorded ? "routed" : "routedByHand";
  return c.recorded ? "changedSince" : "notRouted";
}

const STATUS: Record<ClientState, string> = {
  routed: "Routed through Keyhaven.",
  routedByHand: "Already points at Keyhaven, but not set up from here, so there is nothing to restore.",
  changedSince: "Keyhaven's change was edited or removed since; Restore puts back what can be restored.",
  notRouted: "Not routed: it talks to its own provider directly.",
};

export function clientCard(c: ClientSetup): ClientCard {
  const state = stateOf(c);
  const notes: string[] = [];
  if (!c.installed) notes.push(`Not detected on this machine (no ${folderOf(c.configPath)} folder). Routing creates the config file anyway.`);
  if (c.client === "cursor")
    notes.push("Cursor reaches Keyhaven through the intercepting proxy: install the CA (CA Trust page) and keep the proxy on (Settings).");
  return {
    client: c.client,
    title: c.displayName,
    configPath: c.configPath,
    detected: c.installed,
    state,
    status: STATUS[state],
    canRoute: true,
    routeLabel: state === "routed" ? "Route again" : "Route through Keyhaven",
    canRestore: c.recorded,
    takesModel: c.client === "claudeCode" || c.client === "codex",
    takesHttp2: c.client === "cursor",
    restartHint: c.restartHint,
    notes,
  };
}

/** The folder part of a config path (`/h/.claude/settings.json` → `/h/.claude`). */
export function folderOf(path: string): string {
  const i = Math.max(path.lastIndexOf("/"), path.lastIndexOf("\\"));
  const dir = i > 0 ? path.slice(0, i) : path;
  // Cursor's file sits in `<Cursor>/User/`.
  return dir.replace(/[/\\]User$/, "");
}

export interface RouteForm {
  model: string;
  smallModel: string;
  disableHttp2: boolean;
}

/** The default form: the first configured model, if any. */
export function routeForm(models: Pick<Model, "name">[]): RouteForm {
  return { model: models[0]?.name ?? "", smallModel: "", disableHttp2: false };
}

export function routeOptions(card: Pick<ClientCard, "takesModel" | "takesHttp2" | "client">, f: RouteForm): RouteOptions {
  return {
    model: card.takesModel && f.model.trim() ? f.model.trim() : null,
    smallModel: card.client === "claudeCode" && f.smallModel.trim() ? f.smallModel.trim() : null,
    disableHttp2: card.takesHttp2 && f.disableHttp2,
  };
}

export type DiffKind = "meta" | "hunk" | "add" | "del" | "ctx";

export interface DiffLine {
  kind: DiffKind;
  text: string;
}

/** A unified diff's lines, classified for colouring. */
export function diffLines(diff: string): DiffLine[] {
  if (!diff) return [];
  const lines = diff.replace(/\n$/, "").split("\n");
  return lines.map((text) => {
    if (text.startsWith("+++") || text.startsWith("---")) return { kind: "meta", text };
    if (text.startsWith("@@")) return { kind: "hunk", text };
    if (text.startsWith("+")) return { kind: "add", text };
    if (text.startsWith("-")) return { kind: "del", text };
    return { kind: "ctx", text };
  });
}
