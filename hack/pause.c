/* A pod sandbox's process: sleeps until SIGINT or SIGTERM, reaping any child it inherits.
 * Any program that does this serves as the "pause" image; this one is built here because no
 * registry is reachable (hack/build-kind-tools.sh). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal_number) { (void)signal_number; _exit(0); }

static void reap(int signal_number) {
  (void)signal_number;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction on_stop = {.sa_handler = stop};
  struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &on_stop, NULL);
  sigaction(SIGTERM, &on_stop, NULL);
  sigaction(SIGCHLD, &on_child, NULL);
  for (;;) pause();
  return EXIT_FAILURE;
}
