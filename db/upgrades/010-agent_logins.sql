-- Agents' bounds moved into the registry (db/schema/090-agent_logins.sql): search holds a session
-- of an agent's login to what `agent add` gave it, kept in payrail.agent_logins, no longer to the
-- login's own settings, which the login may change itself. A registry upgraded from before adopts
-- its agent logins' bounds there, once: 090 does it when it has made the table, if this step ran
-- in the same apply (it says so in payrail.adopt_agent_logins).
select payrail._run_upgrade_step('010-agent_logins', $step$
begin
  perform pg_catalog.set_config('payrail.adopt_agent_logins', 'true', false);
end
$step$);
