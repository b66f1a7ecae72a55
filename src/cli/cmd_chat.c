/* cmd_chat.c — `sluice chat` (placeholder while it is written). */
#include "cli/cli.h"
int cmd_chat(int argc, char **argv) { return cli_fail("chat", "not yet"); }
