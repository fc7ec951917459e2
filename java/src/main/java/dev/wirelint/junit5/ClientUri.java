package dev.wirelint.junit5;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** The connection string that reaches an upstream through wirelint. */
final class ClientUri {
  private ClientUri() {}

  // Options that describe how to reach the database, not how to talk to
  // wirelint: the client connects to wirelint over plain TCP, and wirelint
  // presents itself as a router (so no replica-set name, no direct
  // connection).
  private static final Set<String> UPSTREAM_ONLY =
      Set.of(
          "replicaset",
          "directconnection",
          "loadbalanced",
          "srvservicename",
          "srvmaxhosts",
          "tls",
          "ssl",
          "tlscafile",
          "tlscertificatekeyfile",
          "tlscertificatekeyfilepassword",
          "tlsallowinvalidcertificates",
          "tlsallowinvalidhostnames",
          "tlsinsecure",
          "tlsdisableocspendpointcheck");

  private static final Pattern URI = Pattern.compile("^(mongodb(?:\\+srv)?)://([^/?]*)(/[^?]*)?(?:\\?(.*))?$");

  /**
   * The same credentials, database and options as {@code upstream}, with the
   * host replaced by {@code address} ({@code host:port}) and the options that
   * only concern the way to the database (TLS, replica-set name, SRV) left
   * out.
   */
  /** {@code uri} with its credentials left out, for messages. */
  static String redacted(String uri) {
    return uri.replaceFirst("^(mongodb(?:\\+srv)?://)[^@/]*@", "$1***@");
  }

  static String of(String upstream, String address) {
    Matcher m = URI.matcher(upstream);
    if (!m.matches()) {
      throw new IllegalArgumentException("wirelint: the upstream is not a mongodb:// or mongodb+srv:// connection string");
    }
    String authority = m.group(2);
    String path = m.group(3);
    String query = m.group(4);
    int at = authority.lastIndexOf('@');
    String userinfo = at >= 0 ? authority.substring(0, at + 1) : "";
    List<String> kept = new ArrayList<>();
    if (query != null) {
      for (String pair : query.split("&")) {
        if (pair.isEmpty()) {
          continue;
        }
        int eq = pair.indexOf('=');
        String key = eq >= 0 ? pair.substring(0, eq) : pair;
        if (!UPSTREAM_ONLY.contains(key.toLowerCase(Locale.ROOT))) {
          kept.add(pair);
        }
      }
    }
    String tail = kept.isEmpty() ? "" : "?" + String.join("&", kept);
    return "mongodb://" + userinfo + address + (path == null ? "/" : path) + tail;
  }
}
