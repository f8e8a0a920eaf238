/**
 * The client's HTTP exchanges with the control plane: `node:http`/`node:https` with a
 * keep-alive agent per client (a long poll holds one connection; a usage report uses a second),
 * or a `fetch` the service passes in (tests, proxies, custom TLS).
 *
 * `node:http` rather than the global fetch: a fleet's worth of clients in one process answer a
 * change at the same instant, and fetch's WHATWG streams cost several times the CPU per
 * exchange (bench/README.md, "Propagation to TypeScript clients").
 */

import { Agent as HttpAgent, request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

export interface Answer {
  status: number;
  header(name: string): string | null;
  body: string;
}

export interface Exchange {
  (url: string, init: { method: string; headers: Record<string, string>; body?: string; signal: AbortSignal; limit: number }): Promise<Answer>;
  close?(): void;
}

export class TooLarge extends Error {
  override name = "TooLarge";
}

/** Exchanges over keep-alive connections of their own. */
export function nodeExchange(): Exchange {
  const agents = { http: new HttpAgent({ keepAlive: true, maxSockets: 4 }), https: new HttpsAgent({ keepAlive: true, maxSockets: 4 }) };
  const exchange: Exchange = (url, init) =>
    new Promise<Answer>((resolve, reject) => {
      const secure = url.startsWith("https:");
      const headers: Record<string, string> = { ...init.headers };
      if (init.body !== undefined) headers["Content-Length"] = String(Buffer.byteLength(init.body));
      const request = (secure ? httpsRequest : httpRequest)(url, {
        method: init.method,
        headers,
        agent: secure ? agents.https : agents.http,
        signal: init.signal,
      });
      request.on("error", reject);
      request.on("response", (response) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > init.limit) {
            response.destroy(new TooLarge(`response larger than ${init.limit} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        response.on("error", reject);
        response.on("end", () => {
          const raw = response.headers;
          resolve({
            status: response.statusCode ?? 0,
            header: (name) => {
              const value = raw[name.toLowerCase()];
              return value === undefined ? null : Array.isArray(value) ? value.join(", ") : value;
            },
            body: Buffer.concat(chunks).toString("utf8"),
          });
        });
      });
      request.end(init.body);
    });
  exchange.close = () => {
    agents.http.destroy();
    agents.https.destroy();
  };
  return exchange;
}

/** Exchanges through a `fetch` the service gave. */
export function fetchExchange(fetchImpl: typeof globalThis.fetch): Exchange {
  return async (url, init) => {
    const response = await fetchImpl(url, { method: init.method, headers: init.headers, body: init.body, signal: init.signal });
    const body = await response.text();
    if (Buffer.byteLength(body) > init.limit) throw new TooLarge(`response larger than ${init.limit} bytes`);
    return { status: response.status, header: (name) => response.headers.get(name), body };
  };
}
