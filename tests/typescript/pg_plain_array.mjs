// node-postgres sends a plain JS array as a PostgreSQL array literal, which is not a vector: the
// registry refuses it. Prints the error's SQLSTATE and message as one JSON line.
import pg from "pg";

const client = new pg.Client({ connectionString: process.env.PAYRAIL_DATABASE_URL });
await client.connect();
const { rows: [model] } = await client.query("select name, dimensions from payrail.get_embedding_model()");
const embedding = Array.from({ length: model.dimensions }, (_, i) => (i === 0 ? 1 : 0));
try {
  await client.query("select * from payrail.search_provider_methods($1, $2, $3)", ["send an SMS", embedding, model.name]);
  console.log(JSON.stringify({ refused: false }));
} catch (error) {
  console.log(JSON.stringify({ refused: true, code: error.code, message: error.message }));
}
await client.end();
