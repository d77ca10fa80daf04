import { describe, expect, it } from "vitest";
import { clientCard, diffLines, folderOf, routeForm, routeOptions } from "./clients";
import type { ClientSetup } from "./ipc";

const base: ClientSetup = {
  client: "claudeCode",
  displayName: "Claude Code",
  configPath: "/home/u/.claude/settings.json",
  installed: true,
  routed: false,
  recorded: false,
  restartHint: "Start a new Claude Code session.",
};

describe("clientCard", () => {
  it("offers route but not restore before anything was changed", () => {
    const c = clientCard(base);
    expect(c.state).toBe("notRouted");
    expect([c.canRoute, c.canRestore, c.takesModel, c.takesHttp2]).toEqual([true, false, true, false]);
    expect(c.routeLabel).toBe("Route through Keyhaven");
    expect(c.notes).toEqual([]);
  });
  it("offers restore once Keyhaven recorded its change", () => {
    const c = clientCard({ ...base, routed: true, recorded: true });
    expect(c.state).toBe("routed");
    expect(c.canRestore).toBe(true);
    expect(c.routeLabel).toBe("Route again");
  });
  it("tells hand-made routing and edited changes apart", () => {
    expect(clientCard({ ...base, routed: true }).state).toBe("routedByHand");
    expect(clientCard({ ...base, routed: true }).canRestore).toBe(false);
    const edited = clientCard({ ...base, recorded: true });
    expect(edited.state).toBe("changedSince");
    expect(edited.canRestore).toBe(true);
  });
  it("says when a client is not detected, and what Cursor needs", () => {
    const c = clientCard({ ...base, installed: false });
    expect(c.detected).toBe(false);
    expect(c.notes[0]).toContain("/home/u/.claude");
    const cursor = clientCard({ ...base, client: "cursor", displayName: "Cursor", configPath: "/h/.config/Cursor/User/settings.json" });
    expect(cursor.takesHttp2 && !cursor.takesModel).toBe(true);
    expect(cursor.notes.join(" ")).toMatch(/CA/);
  });
});

describe("folderOf", () => {
  it("strips the file and Cursor's User folder", () => {
    expect(folderOf("/h/.config/Cursor/User/settings.json")).toBe("/h/.config/Cursor");
    expect(folderOf("C:\\Users\\u\\.codex\\config.toml")).toBe("C:\\Users\\u\\.codex");
  });
});

describe("routeOptions", () => {
  it("sends only what the client takes", () => {
    const f = { ...routeForm([{ name: "sonnet" }, { name: "haiku" }]), smallModel: "haiku", disableHttp2: true };
    expect(f.model).toBe("sonnet");
    expect(routeOptions(clientCard(base), f)).toEqual({ model: "sonnet", smallModel: "haiku", disableHttp2: false });
    expect(routeOptions(clientCard({ ...base, client: "codex" }), f)).toEqual({ model: "sonnet", smallModel: null, disableHttp2: false });
    expect(routeOptions(clientCard({ ...base, client: "cursor" }), f)).toEqual({ model: null, smallModel: null, disableHttp2: true });
    expect(routeOptions(clientCard(base), { model: " ", smallModel: "", disableHttp2: false }).model).toBeNull();
    expect(routeForm([]).model).toBe("");
  });
});

describe("diffLines", () => {
  it("classifies a unified diff", () => {
    const d = "--- a\n+++ a\n@@ -1,2 +1,3 @@\n {\n-  \"x\": 1\n+  \"x\": 2\n";
    expect(diffLines(d).map((l) => l.kind)).toEqual(["meta", "meta", "hunk", "ctx", "del", "add"]);
    expect(diffLines("")).toEqual([]);
  });
});
