// Calls payrail-embedder's MCP server from the official TypeScript SDK with arguments an agent
// could get wrong; prints each result as one JSON line: {case, isError, text}.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const client = new Client({ name: "payrail-tests", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: "payrail-embedder", args: ["mcp"], env: process.env }));
const cases = {
  "a number": { name: "search_provider_methods", arguments: { query: 123 } },
  "null": { name: "search_provider_methods", arguments: { query: null } },
  "missing": { name: "search_provider_methods", arguments: {} },
  "empty": { name: "search_provider_methods", arguments: { query: "" } },
  "white space": { name: "search_provider_methods", arguments: { query: " \u3000 " } },
  "too long": { name: "search_provider_methods", arguments: { query: "x".repeat(2001) } },
  "an unknown tool": { name: "search_everything", arguments: { query: "hotels" } },
};
for (const [name, call] of Object.entries(cases)) {
  const result = await client.callTool(call);
  console.log(JSON.stringify({ case: name, isError: result.isError ?? false, text: result.content[0].text }));
}
await client.close();
