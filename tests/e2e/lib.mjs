// Shared pieces of the browser end-to-end scripts (tests/it/ui_e2e.rs runs them): Debian's
// Chromium through playwright-core (no downloaded browser), a fresh profile per run, checks.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** What every run passes to Chromium. `--user-data-dir` is the fresh directory handed to
 * `launchPersistentContext` (Playwright sets the flag itself). */
export const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run this through cargo test --test it ui_e2e)`);
  return v;
}

export function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

/** A persistent context on a fresh profile directory, removed again by `close()`. */
export async function launch(extraArgs = []) {
  const profile = mkdtempSync(join(tmpdir(), "keyhaven-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: need("KH_CHROMIUM"),
    headless: true,
    args: [...FLAGS, ...extraArgs],
    viewport: { width: 1280, height: 900 },
    colorScheme: "light",
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Runs `main`, printing `okLine` on success; on failure a screenshot and exit status 1. */
export async function run(main, okLine) {
  let handle;
  try {
    await main((h) => (handle = h));
    console.log(okLine);
    await handle?.close();
    process.exit(0);
  } catch (e) {
    console.error(e?.stack ?? String(e));
    try {
      const page = handle?.context.pages()[0];
      if (page) await page.screenshot({ path: join(need("KH_ARTIFACTS"), "failure.png"), fullPage: true });
    } catch {
      // the browser may be gone
    }
    await handle?.close();
    process.exit(1);
  }
}
