import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.SessionCatalog.SessionContext;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.rest.RESTSessionCatalog;

/**
 * Iceberg's Java REST client driven as Trino 476 drives it with iceberg.rest-catalog.session=USER
 * (TrinoRestCatalog.convert): one RESTSessionCatalog authenticated as the engine (its catalog
 * credential), and per Trino user a SessionContext whose id is "user-source", whose identity is
 * the user, whose properties are user, source, trinoCatalog, trinoVersion, and whose credentials
 * are the session's extra credentials plus an unsigned JWT (alg none) naming the user under
 * urn:ietf:params:oauth:token-type:jwt. Iceberg's OAuth2Manager exchanges that subject, with the
 * engine's token as actor, once per session id, and refreshes the result by exchanging it again.
 *
 * Arguments: uri, then steps, run in order; each prints one line "OK <step> <detail>" or
 * "ERR <step> <exception class>: <message>":
 *   credential=<id:secret>  the engine's catalog credential (before any other step; may be empty)
 *   user=<name>             the Trino user of the following steps
 *   backdate=<seconds>      the following subjects claim to be this much older (a captured,
 *                           replayed subject)
 *   extra=<type>=<token>    an extra credential of the current user's session
 *   load=<ns>.<table>       loadTable as the current user
 *   list=<ns>               listTables as the current user
 *   sleep=<seconds>         wait (the session's token is refreshed in the background meanwhile)
 *   wait                    print "WAITING", read one line from stdin (the test changes something)
 */
public final class TrinoSessionDriver {
  private static final String JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt";
  private static final String TRINO_VERSION = "476";
  private static final String CATALOG = "lake";
  private static final String SOURCE = "trino-cli";

  private static long backdateSeconds = 0;

  private TrinoSessionDriver() {}

  private static String b64(String json) {
    return Base64.getUrlEncoder().withoutPadding().encodeToString(json.getBytes(StandardCharsets.UTF_8));
  }

  private static String quoted(String value) {
    return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
  }

  /** The subject JWT as jjwt's DefaultJwtBuilder writes it for Trino: sub, iss, iat, then the claims. */
  static String subjectJwt(String user) {
    long now = System.currentTimeMillis() / 1000 - backdateSeconds;
    String claims = "{\"sub\":" + quoted(user) + ",\"iss\":" + quoted(TRINO_VERSION) + ",\"iat\":" + now
        + ",\"user\":" + quoted(user) + ",\"source\":" + quoted(SOURCE) + ",\"trinoCatalog\":"
        + quoted(CATALOG) + ",\"trinoVersion\":" + quoted(TRINO_VERSION) + "}";
    return b64("{\"alg\":\"none\"}") + "." + b64(claims) + ".";
  }

  static SessionContext session(String user, Map<String, String> extra) {
    Map<String, String> properties = new LinkedHashMap<>();
    properties.put("user", user);
    properties.put("source", SOURCE);
    properties.put("trinoCatalog", CATALOG);
    properties.put("trinoVersion", TRINO_VERSION);
    Map<String, String> credentials = new HashMap<>(extra);
    credentials.put(JWT_TYPE, subjectJwt(user));
    return new SessionContext(user + "-" + SOURCE, user, credentials, properties, user);
  }

  public static void main(String[] args) throws Exception {
    String uri = args[0];
    Map<String, String> props = new HashMap<>();
    props.put("uri", uri);
    props.put("oauth2-server-uri", uri + "/v1/oauth/tokens");
    props.put("warehouse", "default");
    BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    RESTSessionCatalog catalog = null;
    String user = null;
    Map<String, String> extra = new HashMap<>();
    for (int i = 1; i < args.length; i++) {
      String step = args[i];
      String[] kv = step.split("=", 2);
      String value = kv.length > 1 ? kv[1] : "";
      try {
        switch (kv[0]) {
          case "credential":
            if (!value.isEmpty()) {
              props.put("credential", value);
            }
            catalog = new RESTSessionCatalog();
            catalog.initialize(CATALOG, props);
            System.out.println("OK " + step.split("=")[0] + " initialized");
            break;
          case "user":
            user = value;
            extra = new HashMap<>();
            System.out.println("OK user " + value);
            break;
          case "backdate":
            backdateSeconds = Long.parseLong(value);
            System.out.println("OK " + step);
            break;
          case "extra":
            String[] typed = value.split("=", 2);
            extra.put(typed[0], typed[1]);
            System.out.println("OK extra " + typed[0]);
            break;
          case "load":
            TableIdentifier id = TableIdentifier.parse(value);
            String location = catalog.loadTable(session(user, extra), id).location();
            System.out.println("OK " + step + " " + (location != null));
            break;
          case "list":
            System.out.println("OK " + step + " " + catalog.listTables(session(user, extra), Namespace.of(value)));
            break;
          case "sleep":
            Thread.sleep(Long.parseLong(value) * 1000);
            System.out.println("OK " + step);
            break;
          case "wait":
            System.out.println("WAITING");
            System.out.flush();
            stdin.readLine();
            System.out.println("OK wait");
            break;
          default:
            throw new IllegalArgumentException("unknown step " + step);
        }
      } catch (RuntimeException e) {
        String message = String.valueOf(e.getMessage()).replace('\n', ' ');
        String shown = step.startsWith("credential=") ? "credential" : step;
        System.out.println("ERR " + shown + " " + e.getClass().getSimpleName() + ": " + message);
      }
      System.out.flush();
    }
    if (catalog != null) {
      catalog.close();
    }
    System.exit(0); // the client's token refresh threads must not keep the JVM alive
  }
}
