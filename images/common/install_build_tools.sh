# Compilers and tools for the torch source build (only in the build stage, never in the runtime image).
source "$(dirname "$0")/lib.sh"
apt_install git ca-certificates curl ccache cmake ninja-build pkg-config make g++
apt_clean
