/* weft-dit-sim: the DiT placement policies on a simulated cluster (sched/dit_sim_cli.h). */
#include "sched/dit_sim_cli.h"

int main(int argc, char **argv) { return wf_dit_sim_cli(argc, argv); }
