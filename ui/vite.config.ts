import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

// `npm run dev` proxies /api to a running engine (default 127.0.0.1:4937). The dev server adds
// the control token itself (KEYHAVEN_TOKEN in its environment, e.g. `$(cat <data dir>/control-token)`),
// so the page holds no credential here either.
const engine = process.env.KEYHAVEN_URL ?? "http://127.0.0.1:4937";
const token = process.env.KEYHAVEN_TOKEN;

export default defineConfig({
  plugins: [preact()],
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: {
    proxy: {
      "/api": {
        target: engine,
        changeOrigin: true,
        // The engine refuses foreign Origins; the dev server's own is one.
        configure: (proxy) =>
          proxy.on("proxyReq", (req) => {
            req.removeHeader("origin");
            if (token) req.setHeader("authorization", `Bearer ${token}`);
          }),
      },
    },
  },
  test: { environment: "node", include: ["src/**/*.test.ts"] },
});
