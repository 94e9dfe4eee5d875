# OS packages every stage needs: CA certificates (for https once the proxy secret is gone).
source "$(dirname "$0")/lib.sh"
apt_install ca-certificates
apt_clean
