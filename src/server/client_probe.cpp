#include "server/client_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

#include <httplib.h>

namespace dsv4::server {

namespace {
// Address and port of a socket address (IPv4 or IPv6, v4-mapped printed as plain IPv4 the way
// httplib does).
bool endpoint_of(const sockaddr_storage& sa, std::string& addr, int& port) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(sa);
        if (!inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf)) return false;
        port = ntohs(a.sin_port);
    } else if (sa.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(sa);
        if (!inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf)) return false;
        port = ntohs(a.sin6_port);
    } else {
        return false;
    }
    addr = buf;
    if (addr.rfind("::ffff:", 0) == 0 && addr.find('.') != std::string::npos) addr = addr.substr(7);
    return true;
}

bool same_addr(const std::string& a, const std::string& b) {
    auto strip = [](const std::string& s) { return s.rfind("::ffff:", 0) == 0 ? s.substr(7) : s; };
    return strip(a) == strip(b);
}
}  // namespace

int find_connection_fd(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    while (dirent* e = readdir(d)) {
        char* end = nullptr;
        long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
        struct stat st;
        if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage peer{}, self{};
        socklen_t pl = sizeof peer, sl = sizeof self;
        if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
        if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
        std::string pa, sa;
        int pp = 0, sp = 0;
        if (!endpoint_of(peer, pa, pp) || !endpoint_of(self, sa, sp)) continue;
        if (pp == remote_port && sp == local_port && same_addr(pa, remote_addr) && same_addr(sa, local_addr)) {
            found = int(fd);
            break;
        }
    }
    closedir(d);
    return found;
}

ClientProbe::ClientProbe(const httplib::Request& req)
    : fd_(find_connection_fd(req.local_addr, req.local_port, req.remote_addr, req.remote_port)) {}

bool ClientProbe::gone() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        // Readable: either the end of the stream (recv gives 0) or a pipelined next request.
        char c;
        ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return false;
}

}  // namespace dsv4::server
