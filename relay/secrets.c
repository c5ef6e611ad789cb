/*-------------------------------------------------------------------------
 *
 * secrets.c
 *	  inbox-relay: the secrets file (--secrets), one "TARGET SECRET" line
 *	  per target, which must not be readable by group or others.
 *
 * relay/secrets.c
 *
 *-------------------------------------------------------------------------
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"

/*
 * The secret of target in the secrets file, or NULL.  The file is read at
 * each use, so that a changed secret is taken at the next (re)connection.
 */
char *
relay_secret_for(const char *target)
{
	FILE	   *f;
	struct stat st;
	char		line[4096];
	char	   *found = NULL;

	if (relay_options.secrets_path == NULL)
		return NULL;
	if (stat(relay_options.secrets_path, &st) != 0 || (f = fopen(relay_options.secrets_path, "r")) == NULL)
	{
		relay_log("cannot read the secrets file \"%s\": %s", relay_options.secrets_path, strerror(errno));
		return NULL;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO))
	{
		relay_log("the secrets file \"%s\" is readable by group or others: not used "
				  "(chmod 600 it)", relay_options.secrets_path);
		fclose(f);
		return NULL;
	}
	while (found == NULL && fgets(line, sizeof(line), f) != NULL)
	{
		char	   *t = line + strspn(line, " \t");
		size_t		tlen = strcspn(t, " \t\r\n");
		char	   *s;

		if (*t == '#' || tlen == 0 || tlen != strlen(target) || strncmp(t, target, tlen) != 0)
			continue;
		s = t + tlen;
		s += strspn(s, " \t");
		s[strcspn(s, "\r\n")] = '\0';
		if (*s)
			found = strdup(s);
	}
	fclose(f);
	return found;
}
