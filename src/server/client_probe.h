// Tells whether the client of a request has gone away, while its request is still being served.
//
// cpp-httplib 0.11 (Debian's) gives a handler no socket, and a handler that waits for a queued or
// non-streamed generation writes nothing, so a failed write cannot tell us either. The socket of
// the request is still open (httplib closes it only after the response), and its address pair is
// in the Request, so the probe finds it once among the process's descriptors and then polls it:
// end-of-file or a hang-up means the client closed its side, which is how every HTTP client
// (curl, the SDKs, a killed process) abandons a request.
#pragma once
#include <string>

namespace httplib {
struct Request;
}

namespace dsv4::server {

class ClientProbe {
public:
    // Finds the request's connection; when it cannot be found (not Linux, no /proc) the probe
    // reports the client as present, so requests are still served, just not cancelled early.
    explicit ClientProbe(const httplib::Request& req);

    bool found() const { return fd_ >= 0; }
    // True once the client has closed its side of the connection (or it was reset).
    bool gone() const;

private:
    int fd_ = -1;
};

// The descriptor of the connected TCP socket with these endpoints, or -1 (exposed for tests).
int find_connection_fd(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

}  // namespace dsv4::server
