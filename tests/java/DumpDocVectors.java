// Prints every document of a Lucene index built by Anserini with -storeDocvectors: its id, a tab, and the analysed
// tokens of its "contents" field in position order (a gap left by a removed stop word is not marked).
// Run with the JDK's source launcher: java -cp anserini-0.22.1-fatjar.jar DumpDocVectors.java <index> <out>
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.TreeMap;

import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.PostingsEnum;
import org.apache.lucene.index.Terms;
import org.apache.lucene.index.TermsEnum;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;

public class DumpDocVectors {
  public static void main(String[] args) throws Exception {
    try (DirectoryReader reader = DirectoryReader.open(FSDirectory.open(Paths.get(args[0])));
         PrintWriter out = new PrintWriter(args[1], StandardCharsets.UTF_8)) {
      for (int i = 0; i < reader.maxDoc(); i++) {
        String id = reader.document(i).get("id");
        TreeMap<Integer, String> tokens = new TreeMap<>();
        Terms terms = reader.getTermVector(i, "contents");
        if (terms != null) {
          TermsEnum te = terms.iterator();
          BytesRef term;
          while ((term = te.next()) != null) {
            PostingsEnum pe = te.postings(null, PostingsEnum.POSITIONS);
            pe.nextDoc();
            for (int k = 0; k < pe.freq(); k++) {
              tokens.put(pe.nextPosition(), term.utf8ToString());
            }
          }
        }
        out.println(id + "\t" + String.join(" ", tokens.values()));
      }
    }
  }
}
