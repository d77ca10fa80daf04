// The UI walkthrough (tests/it/ui_e2e.rs `ui_walkthrough_in_chromium`): every flow of issues 6
// and 8 through the real pages in Chromium, then screenshots of every page in light and dark.
// Env: KH_URL (engine), KH_LINK (a one-time dashboard link, as `keyhaven dashboard` prints),
// KH_TOKEN (control token: read-back checks from Node, and to prove the page never has it),
// KH_MOCK_URL, KH_KEY (a provider key to type in), KH_ARTIFACTS, KH_CHROMIUM.
import { join } from "node:path";
import { check, launch, need, run } from "./lib.mjs";

const URL = need("KH_URL");
const TOKEN = need("KH_TOKEN");
const LINK = need("KH_LINK");
const MOCK = need("KH_MOCK_URL");
const KEY = need("KH_KEY");
const ART = need("KH_ARTIFACTS");

const PAGES = [
  ["overview", "Overview"],
  ["providers", "Providers & Models"],
  ["clients", "Clients"],
  ["routing", "Routing"],
  ["calls", "Calls"],
  ["budgets", "Budgets"],
  ["cursor", "Cursor"],
  ["ca", "CA Trust"],
  ["settings", "Settings"],
  ["logs", "Logs"],
];

/** The control API with the token, from Node (never from the page). */
async function control(path) {
  const r = await fetch(URL + path, { headers: { Authorization: `Bearer ${TOKEN}` } });
  check(r.ok, `GET ${path}: ${r.status}`);
  return r.json();
}

function step(what) {
  console.log(`- ${what}`);
}

await run(async (keep) => {
  const browser = await launch();
  keep(browser);
  const { context } = browser;
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: URL });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.setDefaultTimeout(20_000);

  const nav = async (label) => {
    await page.getByRole("navigation", { name: "Pages" }).getByRole("link", { name: label, exact: true }).click();
    await page.locator("h1", { hasText: label }).waitFor();
  };
  const shot = (name) => page.screenshot({ path: join(ART, `${name}.png`), fullPage: true });
  const settle = () => page.waitForFunction(() => !document.querySelector("main [role=status]")?.textContent?.includes("Loading"));

  step("without a session the page says how to open the dashboard");
  await page.goto(`${URL}/#/overview`);
  await page.getByRole("alert").filter({ hasText: "not signed in" }).waitFor();
  check((await page.getByText("keyhaven dashboard").count()) > 0, "the notice names `keyhaven dashboard`");
  await shot("no-session");

  step("the one-time link gives a session; the page and its cookie jar never show a credential");
  await page.goto(LINK);
  await page.locator("h1", { hasText: "Overview" }).waitFor();
  check(new globalThis.URL(page.url()).search === "", `the nonce left the address bar: ${page.url()}`);
  check(!(await page.content()).includes(TOKEN), "the page has no control token");
  check((await page.evaluate(() => document.cookie)) === "", "the session cookie is HttpOnly");
  const cookies = await context.cookies(URL);
  check(cookies.length === 1 && cookies[0].httpOnly && cookies[0].sameSite === "Strict", `one strict HttpOnly cookie: ${JSON.stringify(cookies.map((c) => ({ ...c, value: "…" })))}`);
  check(cookies[0].value !== TOKEN, "the cookie is not the control token");
  const again = await context.request.get(LINK, { maxRedirects: 0 });
  check(again.status() === 401, `a used link is refused (${again.status()})`);
  await page.goto(`${URL}/#/overview`);
  await page.locator("h1", { hasText: "Overview" }).waitFor();
  check((await page.getByRole("alert").filter({ hasText: "not signed in" }).count()) === 0, "no sign-in notice with a session");
  await page.keyboard.press("Tab");
  check((await page.evaluate(() => document.activeElement?.textContent)) === "Skip to content", "the first Tab reaches the skip link");
  await page.keyboard.press("Enter");
  check((await page.evaluate(() => document.activeElement?.id)) === "main", "the skip link focuses the content");
  await page.getByText("No calls today yet.").waitFor();
  await shot("overview-empty");

  step("add a provider through the form (validation first)");
  await nav("Providers & Models");
  await page.getByText("No providers yet.").waitFor();
  await page.locator(".toolbar").getByRole("button", { name: "Add provider" }).click();
  const addP = page.locator('form[aria-label="Add a provider"]');
  await addP.locator("#p-preset").selectOption("custom");
  await addP.locator("#p-name").fill("mock");
  await addP.locator("#p-kind").selectOption("openai");
  await addP.locator("#p-baseUrl").fill("not a url");
  await addP.locator("#p-keySource").selectOption("keyring");
  await addP.locator("#p-keyName").fill("mock");
  await addP.locator("button[type=submit]").click();
  await addP.getByText("This is not a valid URL.").waitFor();
  check((await addP.locator("#p-baseUrl").getAttribute("aria-invalid")) === "true", "the bad field is marked invalid");
  await addP.locator("#p-baseUrl").fill(`${MOCK}/v1`);
  await addP.locator("button[type=submit]").click();
  const card = page.locator('li[data-provider="mock"]');
  await card.waitFor();
  await card.getByText("key missing").waitFor();

  step("store its key (write-only)");
  await card.getByRole("button", { name: "Set key" }).click();
  await card.locator("#key-mock").fill(KEY);
  await card.getByRole("button", { name: "Save key" }).click();
  await card.getByText("key in keyring (mock)").waitFor();
  await card.getByRole("button", { name: "Replace key" }).waitFor();
  check(!(await page.content()).includes(KEY), "the key is not in the page");
  check(!JSON.stringify(await control("/api/providers")).includes(KEY), "the key is not in any answer");

  step("delete asks first; cancel keeps the provider");
  await card.getByRole("button", { name: "Delete", exact: true }).click();
  await card.getByText("Delete provider mock?").waitFor();
  await card.getByRole("button", { name: "Cancel" }).click();
  check((await card.count()) === 1, "still there after cancel");

  step("add a model, then edit it");
  await page.locator(".toolbar").getByRole("button", { name: "Add model" }).click();
  const addM = page.locator('form[aria-label="Add a model"]');
  await addM.locator("button[type=submit]").click();
  await addM.getByText("Enter the name clients will ask for.").waitFor();
  await addM.locator("#m-name").fill("e2e-model");
  await addM.locator("#m-provider").selectOption("mock");
  await addM.locator("#m-upstream").fill("gpt-4o-mini");
  await addM.locator("button[type=submit]").click();
  const row = page.locator('tr[data-model="e2e-model"]');
  await row.waitFor();
  await row.getByRole("button", { name: "Edit" }).click();
  const editM = page.locator('form[aria-label="Edit model e2e-model"]');
  await editM.locator("#me-e2e-model-aliases").fill("e2e-alias");
  await editM.getByRole("button", { name: "Save model" }).click();
  await row.getByText("also e2e-alias").waitFor();
  await row.getByRole("button", { name: "Test" }).click();
  await row.locator(".notice.ok", { hasText: "Works" }).waitFor();
  // The provider's health reflects the test without a page reload.
  await card.getByText("1 ok / 0 failed").waitFor();
  await shot("providers-filled");

  step("send /v1/chat/completions and /v1/messages from Node");
  const chat = await fetch(`${URL}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "e2e-model", messages: [{ role: "user", content: "Hello from the e2e test" }] }),
  });
  const chatText = await chat.text();
  check(chat.status === 200, `chat: ${chat.status} ${chatText}`);
  check(JSON.parse(chatText).choices?.[0]?.message?.role === "assistant", `chat answer: ${chatText}`);
  const msg = await fetch(`${URL}/v1/messages`, {
    method: "POST",
    // As Claude Code does: its session on every request.
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-claude-code-session-id": "e2e-session-0001" },
    body: JSON.stringify({ model: "e2e-alias", max_tokens: 64, messages: [{ role: "user", content: "Hello again" }] }),
  });
  const msgText = await msg.text();
  check(msg.status === 200, `messages: ${msg.status} ${msgText}`);
  check(JSON.parse(msgText).type === "message", `messages answer: ${msgText}`);

  step("see them in Calls");
  await nav("Calls");
  const rows = page.locator("table.table tbody tr");
  await page.waitForFunction(() => document.querySelectorAll("table.table tbody tr").length >= 3);
  const listed = await rows.allInnerTexts();
  check(listed.some((t) => t.includes("e2e-alias")) && listed.some((t) => t.includes("e2e-model")), `calls listed: ${listed.join(" | ")}`);
  step("group and filter them by the client's session");
  await page.locator("details.sessions summary").click();
  await page.locator("details.sessions").getByRole("button", { name: "Session e2e-session-0001" }).click();
  await page.waitForFunction(() => document.querySelectorAll("table.calls tbody tr").length === 1);
  const bySession = await page.locator("table.calls tbody tr").allInnerTexts();
  check(bySession.length === 1 && bySession[0].includes("e2e-alias"), `calls of the session: ${bySession.join(" | ")}`);
  await shot("calls-by-session");
  await rows.filter({ hasText: "e2e-alias" }).first().getByRole("link").click();
  await page.locator("dd", { hasText: "anthropic" }).first().waitFor();
  await page.getByText("Request body").waitFor();
  await shot("call-detail");
  await page.getByRole("link", { name: "← All calls" }).click();

  step("see them in the Overview: today, splits, charts");
  await nav("Overview");
  await page.getByText("Today's spend").waitFor();
  await page.locator('table[aria-label="Cost by model today"]', { hasText: "e2e-model" }).waitFor();
  check((await page.locator("figure.chart svg rect").count()) > 0, "charts have columns");
  await page.locator("#ov-split").selectOption("provider");
  await page.locator('table[aria-label="Tokens by provider today"]', { hasText: "mock" }).waitFor();
  await page.locator("h3", { hasText: "Cost per day by provider" }).waitFor();
  await page.locator("#ov-split").selectOption("client");
  await page.locator('table[aria-label="Cost by client today"]').waitFor();
  await page.locator("#ov-split").selectOption("model");
  await page.locator("#ov-days").selectOption("30");
  await page.locator("h3", { hasText: "Latency per day" }).waitFor();
  await page.locator("h3", { hasText: "Calls and errors per day" }).waitFor();

  step("switch the routing mode");
  await nav("Routing");
  // A controlled radio: it shows the engine's mode, which changes once the PUT is answered.
  await page.locator('input[value="upstream"]').click();
  for (let i = 0; i < 100 && (await control("/api/routing")).mode !== "upstream"; i++) await new Promise((r) => setTimeout(r, 100));
  check((await control("/api/routing")).mode === "upstream", "routing mode switched");
  await page.waitForFunction(() => document.querySelector('input[value="upstream"]')?.checked === true);

  step("the CA page shows status; install into the trust store");
  await nav("CA Trust");
  await page.getByText("Fingerprint (SHA-256)").waitFor();
  await page.locator("table.table td", { hasText: "absent" }).first().waitFor();
  await page.getByRole("button", { name: "Install CA", exact: true }).click();
  await page.locator(".notice.ok", { hasText: "Done." }).waitFor();
  await page.locator("table.table td", { hasText: "present" }).first().waitFor();

  step("Clients: detection, preview, route and restore Claude Code, route Cursor");
  await nav("Clients");
  const claude = page.locator("#client-claudeCode");
  const cursor = page.locator("#client-cursor");
  const codex = page.locator("#client-codex");
  await claude.waitFor();
  check((await codex.locator(".tag").first().innerText()) === "not detected", "Codex is not installed in the fixture home");
  check((await claude.locator(".tag").first().innerText()) === "detected", "Claude Code is");
  check((await claude.getByTestId("routed").innerText()) === "not routed", "not routed yet");
  await claude.locator("#client-claudeCode-model").selectOption("e2e-model");
  await claude.getByRole("button", { name: "Preview route" }).click();
  const diff = claude.locator("pre.diff");
  await diff.waitFor();
  const diffText = await diff.innerText();
  check(diffText.includes("ANTHROPIC_BASE_URL") && diffText.includes("e2e-model") && diffText.includes("[REDACTED]"), `route preview: ${diffText}`);
  check(!/kh-[0-9a-f]{64}/.test(diffText), "the preview never shows the token");
  await claude.getByRole("button", { name: "Route through Keyhaven" }).click();
  await claude.locator(".notice.ok", { hasText: "routed through Keyhaven" }).waitFor();
  await claude.getByText("Start a new Claude Code session").waitFor();
  await page.waitForFunction(() => document.querySelector("#client-claudeCode [data-testid=routed]")?.textContent === "routed");
  await claude.getByRole("button", { name: "Preview restore" }).click();
  await claude.locator("pre.diff span.d-del", { hasText: "ANTHROPIC_BASE_URL" }).waitFor();
  await shot("clients-routed");
  await claude.getByRole("button", { name: "Restore original" }).click();
  await claude.locator(".notice.ok", { hasText: "restored" }).waitFor();
  await page.waitForFunction(() => document.querySelector("#client-claudeCode [data-testid=routed]")?.textContent === "not routed");
  await cursor.getByRole("button", { name: "Route through Keyhaven" }).click();
  await cursor.locator(".notice.ok", { hasText: "Restart Cursor" }).waitFor();
  await page.waitForFunction(() => document.querySelector("#client-cursor [data-testid=routed]")?.textContent === "routed");

  step("Generic: exports with a copy button");
  const env = page.locator("#client-env");
  const exportsPre = env.getByTestId("exports");
  await exportsPre.waitFor();
  const redacted = await exportsPre.innerText();
  check(redacted.includes("export OPENAI_BASE_URL=") && redacted.includes("export ANTHROPIC_BASE_URL=") && !/kh-[0-9a-f]{64}/.test(redacted), `exports before copy: ${redacted}`);
  await env.getByRole("button", { name: "Copy exports" }).click();
  await env.getByText("Copied.").waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  check(/export OPENAI_API_KEY='kh-[0-9a-f]{64}'/.test(copied), "the clipboard has the exports with the token");
  check((await exportsPre.innerText()).trim() === copied.trim(), "the page shows what was copied");

  step("Settings: the Web tools section saves the provider; the Brave key field is write-only");
  await nav("Settings");
  const web = page.locator("#web-tools");
  await web.getByRole("heading", { name: "Web tools" }).waitFor();
  await web.locator("#web-search").selectOption("brave");
  check((await web.locator("#web-key").getAttribute("type")) === "password", "the key field is a password field");
  await web.getByRole("button", { name: "Save web tools" }).click();
  await web.locator("#web-restart").waitFor();
  check((await control("/api/web")).search === "brave", "the provider was saved");

  step("Budgets: a budget added on the page is written and reported with this month's spend");
  await nav("Budgets");
  const add = page.getByRole("form", { name: "Add a budget" });
  await add.locator("#add-a-budget-name").fill("e2e-monthly");
  await add.locator("#add-a-budget-limitUsd").fill("50");
  await add.getByRole("button", { name: "Save budget" }).click();
  await page.locator("tr[data-budget=e2e-monthly]").waitFor();
  const budgets = await control("/api/budgets");
  check(budgets.budgets.length === 1 && budgets.budgets[0].name === "e2e-monthly" && budgets.budgets[0].limitUsd === 50, `budget saved: ${JSON.stringify(budgets)}`);

  step("screenshots of every page, light and dark");
  for (const scheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const [path, label] of PAGES) {
      await nav(label);
      await settle();
      if (path === "overview") await page.getByText("Today's spend").waitFor();
      if (path === "calls") await page.waitForFunction(() => document.querySelectorAll("table.table tbody tr").length >= 3);
      if (path === "ca") await page.getByText("Fingerprint (SHA-256)").waitFor();
      if (path === "budgets") await page.locator("tr[data-budget=e2e-monthly]").waitFor();
      if (path === "clients") await page.locator("#client-env pre").waitFor();
      await shot(`${path}-${scheme}`);
    }
  }
  const bg = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
  check(bg === "rgb(18, 20, 24)", `dark mode applies (background ${bg})`);
  check(errors.length === 0, `no script errors: ${errors.join("; ")}`);
}, "E2E OK");
