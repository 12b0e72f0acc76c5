/* weft-dit-sim's command line, a function so that weft-sim can hand over to it
 * (`weft-sim --dit ...`: the DiT placement simulator is weft-dit-sim, the LLM one weft-sim):
 *
 *     int main(int argc, char **argv) { return wf_dit_sim_cli(argc, argv); }
 *
 * argv[0] is the program's name, the rest weft-dit-sim's options (`--help` lists them). Prints
 * the report to stdout and errors, each naming the option or file at fault, to stderr.
 * Returns the exit status: 0, or 2 for bad options or input. Not reentrant (getopt). */
#ifndef WF_SCHED_DIT_SIM_CLI_H
#define WF_SCHED_DIT_SIM_CLI_H

int wf_dit_sim_cli(int argc, char **argv);

#endif
