/*-------------------------------------------------------------------------
 *
 * receive.c
 *	  inbox-relay: a batch into an inbox with inbox_receive_many.
 *
 * The messages go as array literals, in one statement, which returns each
 * one's ordinality and status; a message the inbox holds with other
 * content comes back as a mismatch (on_mismatch => 'return') rather than
 * failing its batch-mates.  All are of one kind of payload: JSON text, or
 * bytes (binary), sent as bytea's hex form.
 *
 * relay/receive.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdlib.h>
#include <string.h>

#include "receive.h"
#include "relay.h"

/*
 * Receive r[0 .. count - 1] into scope; with grouped, each in the group
 * of its group_key (NULL: none).  The caller clears the result.
 */
PGresult *
relay_receive_many(PGconn *conn, const char *scope, const RelayReceived *r, int count,
				   bool binary, bool grouped)
{
	RelayText	ids = {0},
				payloads = {0},
				keys = {0};
	const char *params[4];
	PGresult   *res;

	relay_text_append(&ids, "{", 1);
	relay_text_append(&payloads, "{", 1);
	relay_text_append(&keys, "{", 1);
	for (int i = 0; i < count; i++)
	{
		relay_text_element(&ids, r[i].id, strlen(r[i].id), false);
		relay_text_element(&payloads, r[i].body, r[i].body_len, binary);
		relay_text_element(&keys, r[i].group_key, r[i].group_key ? strlen(r[i].group_key) : 0, false);
	}
	relay_text_append(&ids, "}", 1);
	relay_text_append(&payloads, "}", 1);
	relay_text_append(&keys, "}", 1);
	params[0] = scope;
	params[1] = ids.data;
	params[2] = payloads.data;
	params[3] = keys.data;
	if (grouped)
		res = PQexecParams(conn, binary ?
						   "SELECT r.ordinality, r.status FROM inbox_receive_many($1, $2::text[], "
						   "$3::bytea[], on_mismatch => 'return', group_keys => $4::text[]) AS r" :
						   "SELECT r.ordinality, r.status FROM inbox_receive_many($1, $2::text[], "
						   "$3::jsonb[], on_mismatch => 'return', group_keys => $4::text[]) AS r",
						   4, NULL, params, NULL, NULL, 0);
	else
		res = PQexecParams(conn, binary ?
						   "SELECT r.ordinality, r.status FROM inbox_receive_many($1, $2::text[], "
						   "$3::bytea[], on_mismatch => 'return') AS r" :
						   "SELECT r.ordinality, r.status FROM inbox_receive_many($1, $2::text[], "
						   "$3::jsonb[], on_mismatch => 'return') AS r",
						   3, NULL, params, NULL, NULL, 0);
	free(ids.data);
	free(payloads.data);
	free(keys.data);
	return res;
}
